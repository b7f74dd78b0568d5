"""A fake pack trainer on the search's trainer seam (``executors.Trainer``): whole searches in
milliseconds, no TensorFlow, through ``PackedSearch`` here (``fake_search``) or through the
config, runner, journal, tracker, ``results.json`` and plots (``packexp.app.main.run(cfg,
run_dir, trainer=FakeTrainer())``; ``packexp.tune`` always trains with TensorFlow).

A member's score is ``x / 100`` where the space has an ``x`` hyper-parameter (at any epochs),
else a number in [0.05, 0.95) drawn from its hyper-parameters' values that grows with its
epochs (``score``); None for the one that diverges (``FakeTrainer.failing``). Its state is a
JSON file of whose weights it holds and its step counter; its "model" is a JSON file too.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from packexp.errors import ConfigError
from packexp.events import Listener, Listeners, TrialEnded
from packexp.executors import Executor, LocalExecutor
from packexp.executors.base import DeviceReport
from packexp.objectives import ACCURACY, Objective
from packexp.packing.runs import Evaluation, MemberResult, PackRun, PackStats
from packexp.runner import PackedSearch, SearchSettings, Study
from packexp.runner.journal import Journal
from packexp.samplers import Sampler
from packexp.schedulers import Hyperband
from packexp.schedulers.base import Bracket
from packexp.space import SearchSpace, Trial
from packexp.space.options import member_key, steps_for
from packexp.startup import mark
from packexp.strategies import Capacity, Strategy, WeighsCosts, greedy_fill

SPACE = SearchSpace({"x": list(range(40)), "batch_size": [10]})
TRAIN_SIZE = 100
HYPERBAND = Hyperband(9, 3)  # rungs of 9, 3, 1; 5, 1; 3 trials


class InOrder(Strategy):
    """Packs trials in the order given, as many as fit."""

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        return greedy_fill(trials, capacity)


@dataclass(frozen=True)
class State:
    """A member's state: whose weights it holds (``trial_id``) and its step counter."""

    trial_id: str
    step: int

    @property
    def weights(self) -> str:
        return self.trial_id

    slots = None


class FakeTrainer:
    """The trainer seam's fake (``executors.Trainer``): ``train_group``, the states, the
    exported models, and the device of a trainer that measures none: nothing to start or
    ready, a cache that keeps nothing, no facts, and ``members`` to a pack.

    Each call notes what it was given, what it returned and the journal as it stood.
    ``die_at_call`` raises ``KeyboardInterrupt`` at that call, as a Ctrl-C mid-search would.

    Args:
        failing: The trial that diverges.
        members: How many members one pack holds (``prepare_device``).
    """

    name = "fake"
    measures_device = False
    checkpoint_suffix = ".json"

    def __init__(self, failing: str = "b2-t004", members: int = 2) -> None:
        self.failing = failing  # this member diverges
        self.members = members
        self.calls: list[dict] = []
        self.reads: list[str] = []
        self.die_at_call: int | None = None
        self.journal: Journal | None = None

    def train_group(self, group: Sequence[Trial], cache: Any, epochs: float,
                    states: Mapping[str, State | None], fusion: str | None = None,
                    lr_horizon: float | None = None) -> list[PackRun]:
        if len(self.calls) == self.die_at_call:
            raise KeyboardInterrupt
        started = time.perf_counter()  # the runner's clock: a pack's place on the timeline
        train_size = getattr(cache, "train_size", TRAIN_SIZE)
        members, evaluation = [], {}
        for t in group:
            failed = t.trial_id == self.failing
            state = State(t.trial_id, steps_for(epochs, t.hparams["batch_size"], train_size))
            members.append(MemberResult(t, state, failed, None if failed else 1.0))
            accuracy = None if failed else score(t.hparams, epochs)
            evaluation[t.trial_id] = Evaluation(
                val_accuracy=accuracy,
                val_loss=None if failed else 2 * accuracy)  # ranks opposite to accuracy
        self.calls.append({"ids": [t.trial_id for t in group], "epochs": epochs,
                           "states": dict(states), "fusion": fusion, "lr_horizon": lr_horizon,
                           "returned": {m.trial_id: m.state for m in members if not m.failed},
                           "journal": self.journal.read() if self.journal else []})
        stats = PackStats(members=len(group), steps=1, chunk_step_ms=[1.0])
        return [PackRun(members=members, stats=stats, evaluation=evaluation,
                        peak_memory_bytes=0, started=started)]

    def write_state(self, state: State, path: str | Path) -> str:
        final = Path(path).with_suffix(self.checkpoint_suffix)
        final.parent.mkdir(parents=True, exist_ok=True)
        final.write_text(json.dumps({"trial_id": state.trial_id, "step": state.step}))
        return str(final)

    def read_state(self, path: str | Path) -> State:
        self.reads.append(str(path))
        return State(**json.loads(Path(path).read_text()))

    def member_state(self, weights: str, slots: None, step: int,
                     fresh_slots: bool = False) -> State:
        """A population's copy of its donor's weights, at ``step``."""
        return State(weights, step)

    def export(self, trial: Trial, state: State, cache: Any, run_dir: Path,
               name: str | None = None) -> SimpleNamespace:
        """The "model": ``models/<name>.json``, whose weights and step it holds."""
        relative = Path("models") / f"{name or trial.trial_id}.json"
        (run_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / relative).write_text(json.dumps(
            {"trial_id": trial.trial_id, "weights": state.trial_id, "step": state.step,
             "hparams": dict(trial.hparams)}, sort_keys=True))
        return SimpleNamespace(file=relative.as_posix(), whole=True, why=None)

    def start(self, tensorflow: Callable[[], None]) -> None:
        """Starts nothing: no TensorFlow."""

    def set_up(self, parts: Any, probe: bool) -> None:
        """Readies nothing: no model is built."""

    def cache(self, parts: Any, dataset: Any) -> FakeCache:
        """A cache that keeps nothing, for a search of ``dataset``."""
        return FakeCache(dataset.train_size)

    def device_facts(self, parts: Any, executor: Executor) -> Any:
        """The device, as ``telemetry.DeviceFacts`` says it: none measured."""
        from packexp.telemetry import DeviceFacts

        return DeviceFacts("fake", None, ())

    def prepare_device(self, parts: Any, cache: Any, executor: Executor, facts: Any,
                       run_dir: Path) -> DeviceReport:
        """``members`` to a pack (at most the search's ``max_members``), whatever their size;
        a strategy that weighs costs, which are measured on a device, is refused."""
        if isinstance(parts.strategy, WeighsCosts) and executor.simulated:
            raise ConfigError(f"strategy={parts.names['strategy']}: weighs costs measured on "
                              f"the device, which executor=simulated's {self.name} trainer "
                              "does not measure; add strategy=knn (or none, random, "
                              "batch_size)")
        if isinstance(parts.strategy, WeighsCosts):
            raise ConfigError(f"strategy={parts.names['strategy']}: weighs measured costs, "
                              f"which the {self.name} trainer does not measure")
        mark("capacity")
        return DeviceReport(Capacity.members(min(self.members, parts.max_members)),
                            f"{self.name} trainer")

    def trained(self) -> list[tuple[str, float]]:
        return [(i, c["epochs"]) for c in self.calls for i in c["ids"]]


def score(hparams: Mapping[str, Any], epochs: float) -> float:
    """A member's validation accuracy after ``epochs``: ``x / 100`` where it has an ``x``;
    else a number in [0.05, 0.95) drawn from its values, times ``epochs / (epochs + 1)``
    (more epochs, a higher score; a promoted trial keeps its rank)."""
    if "x" in hparams:
        return hparams["x"] / 100
    digest = hashlib.sha256(json.dumps(dict(hparams), sort_keys=True, default=str).encode())
    base = 0.05 + 0.9 * int(digest.hexdigest()[:8], 16) / 16**8
    return round(base * epochs / (epochs + 1), 6)


class Ended(Listener):
    """Hears which trials end, and how."""

    def __init__(self) -> None:
        self.ended: dict[str, str] = {}

    def on_trial_ended(self, event: TrialEnded) -> None:
        self.ended[event.trial_id] = event.status


class FakeCache:
    """A pack cache that keeps nothing."""

    replayed: frozenset[tuple] = frozenset()
    model_runtime: tuple[str, ...] = ()
    bucketed = False

    def __init__(self, train_size: int = TRAIN_SIZE) -> None:
        self.train_size = train_size
        self.data = SimpleNamespace(train_size=train_size)

    def kept(self) -> tuple[frozenset[tuple], dict[tuple, int]]:
        return frozenset(), {}

    def member_key(self, trial: Trial, sliced: bool = False) -> tuple:
        """As ``PackCache.member_key``: which members may take each other's states."""
        return member_key(trial, sliced, self.model_runtime)


def fake_search(run_dir: Path, trainer: FakeTrainer, brackets: Sequence[Bracket] | None = None,
                strategy: Strategy | None = None, sampler: Sampler | None = None,
                objective: Objective = ACCURACY, executor: Executor | None = None,
                **settings: Any) -> PackedSearch:
    """A search of two-member packs over ``SPACE`` on ``trainer``, journaling to ``run_dir``:
    where that holds a journal already, the search there resumed (its study replays it).
    Hyperband's brackets at R=9 unless ``brackets``. Its listener is an ``Ended``. The
    trainer scores a trial of ``x`` with accuracy ``x/100`` and loss ``x/50``: the loss
    objective ranks trials the other way. ``executor``: where its packs train, started here
    with the fake's cache (a ``LocalExecutor`` on ``trainer`` unless given); ``settings``:
    ``SearchSettings``' fields (``continue_on_promotion``, ``budget``, ``keep``,
    ``lr_horizon``...) other than its seed 0, tags and training size."""
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir)
    study = Study.open(run_dir, objective, resume=journal.exists)
    trainer.journal = journal
    cache = FakeCache()
    search = PackedSearch(
        space=SPACE, strategy=strategy or InOrder(), capacity=Capacity.members(2),
        executor=(executor or LocalExecutor(trainer=trainer)).start(cache), study=study,
        listeners=Listeners([Ended()]),
        settings=SearchSettings(**{"seed": 0, "tags": {"strategy": "fake"},
                                   "train_size": TRAIN_SIZE, **settings}),
        sampler=sampler or Sampler())
    search.brackets = tuple(HYPERBAND.brackets() if brackets is None else brackets)
    return search


def outcome(search: PackedSearch, leave_out: tuple[str, ...] = ("checkpoint",)) -> dict:
    """Each trial's status and rungs without the ``leave_out`` keys."""
    return {i: (t.status, [{k: v for k, v in r.to_dict().items() if k not in leave_out}
                           for r in t.rungs])
            for i, t in search.trials.items()}
