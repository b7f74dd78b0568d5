"""The search (``PackedSearch``) on a fake pack trainer: searches in milliseconds, no TensorFlow.

A member's score is ``x / 100`` (its ``x`` hyper-parameter) at any epochs, or None for the one
that diverges (``FakeTrainer.failing``). ``install_fake_trainer`` puts the fake in place of the
modules ``PackedSearch`` imports when it trains.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from packexp.events import Listener, Listeners, TrialEnded
from packexp.listeners import JournalListener, ResultsCollector
from packexp.objectives import ACCURACY, Objective
from packexp.records.journal import Journal
from packexp.runner import PackedSearch
from packexp.runner.budget import NO_BUDGET, Budget
from packexp.samplers import Sampler
from packexp.schedulers import Hyperband
from packexp.schedulers.base import Bracket
from packexp.space import SearchSpace, Trial
from packexp.space.options import member_key, steps_for
from packexp.strategies import Capacity, Strategy, greedy_fill

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


def member_state(weights: str, slots: None, step: int, fresh_slots: bool = False) -> State:
    """``MemberState`` of the fake: a population's copy of its donor's weights."""
    return State(weights, step)


@dataclass(frozen=True)
class MemberResult:
    trial: Trial
    state: State
    failed: bool
    train_loss: float | None
    checkpoint: str | None = None

    @property
    def trial_id(self) -> str:
        return self.trial.trial_id

    @property
    def step(self) -> int:
        return self.state.step


class FakeTrainer:
    """``train_group``, ``write_state`` and ``read_state`` without TensorFlow.

    Each call notes what it was given, what it returned and the journal as it stood.
    ``die_at_call`` raises ``KeyboardInterrupt`` at that call, as a Ctrl-C mid-search would.
    """

    def __init__(self, failing: str = "b2-t004") -> None:
        self.failing = failing  # this member diverges
        self.calls: list[dict] = []
        self.reads: list[str] = []
        self.die_at_call: int | None = None
        self.journal: Journal | None = None

    def train_group(self, group: Sequence[Trial], cache: Any, epochs: float,
                    states: Mapping[str, State | None], splits: int = 0,
                    fusion: str | None = None,
                    lr_horizon: float | None = None) -> list[SimpleNamespace]:
        if len(self.calls) == self.die_at_call:
            raise KeyboardInterrupt
        members, evaluation = [], {}
        for t in group:
            failed = t.trial_id == self.failing
            state = State(t.trial_id, steps_for(epochs, t.hparams["batch_size"], TRAIN_SIZE))
            members.append(MemberResult(t, state, failed, None if failed else 1.0))
            evaluation[t.trial_id] = SimpleNamespace(
                val_accuracy=None if failed else t.hparams["x"] / 100,
                val_loss=None if failed else t.hparams["x"] / 50)  # ranks opposite to accuracy
        self.calls.append({"ids": [t.trial_id for t in group], "epochs": epochs,
                           "states": dict(states), "fusion": fusion, "lr_horizon": lr_horizon,
                           "returned": {m.trial_id: m.state for m in members if not m.failed},
                           "journal": self.journal.read() if self.journal else []})
        stats = SimpleNamespace(fused=False, looped=False, xla=False, grouped_conv=None, steps=1,
                                trace_s=0.0, programs=0, eval_programs=0,
                                train_s=0.0, read_s=0.0, switches=0, switch_overhead_s=0.0,
                                step_time_ms=1.0)
        return [SimpleNamespace(members=members, stats=stats, evaluation=evaluation,
                                peak_memory_bytes=0, peak_rss_bytes=0,
                                gpu_peak_bytes=None, splits=splits, reused=False,
                                reused_members=0, build_s=0.0, eval_s=0.0, started=0.0)]

    def write_state(self, state: State, path: Path) -> str:
        final = Path(path).with_suffix(".json")
        final.parent.mkdir(parents=True, exist_ok=True)
        final.write_text(json.dumps({"trial_id": state.trial_id, "step": state.step}))
        return str(final)

    def read_state(self, path: str) -> State:
        self.reads.append(path)
        return State(**json.loads(Path(path).read_text()))

    def trained(self) -> list[tuple[str, float]]:
        return [(i, c["epochs"]) for c in self.calls for i in c["ids"]]


def install_fake_trainer(monkeypatch) -> FakeTrainer:
    """The fake, in place of the TensorFlow modules ``PackedSearch`` imports when it trains
    (``monkeypatch``: pytest's fixture, which puts them back after the test)."""
    fake = FakeTrainer()
    for name, functions in (("trainer", {"train_group": fake.train_group}),
                            ("member", {"write_state": fake.write_state,
                                        "read_state": fake.read_state,
                                        "MemberState": member_state})):
        module = ModuleType(f"packexp.packing.{name}")
        for function, value in functions.items():
            setattr(module, function, value)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return fake


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

    def kept(self) -> tuple[frozenset[tuple], dict[tuple, int]]:
        return frozenset(), {}

    def member_key(self, trial: Trial, sliced: bool = False) -> tuple:
        """As ``PackCache.member_key``: which members may take each other's states."""
        return member_key(trial, sliced, self.model_runtime)


def fake_search(run_dir: Path, trainer: FakeTrainer, brackets: Sequence[Bracket] | None = None,
                strategy: Strategy | None = None, continue_on_promotion: bool = True,
                sampler: Sampler | None = None, objective: Objective = ACCURACY,
                budget: Budget = NO_BUDGET) -> PackedSearch:
    """A search of two-member packs over ``SPACE`` on ``trainer``, journaling to ``run_dir``
    (continued if it has a journal); Hyperband's brackets at R=9 unless ``brackets``. Its
    listeners are the journal's and an ``Ended``. The trainer scores a trial of ``x`` with
    accuracy ``x/100`` and loss ``x/50``: the loss objective ranks trials the other way."""
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir)
    if not journal.exists:
        journal.append("start", config={})
    trainer.journal = journal
    return PackedSearch(space=SPACE, strategy=strategy or InOrder(),
                        capacity=Capacity.members(2), cache=FakeCache(),
                        listeners=Listeners([JournalListener(journal), Ended()]),
                        checkpoints=run_dir / "checkpoints", seed=0,
                        tags={"strategy": "fake"}, continue_on_promotion=continue_on_promotion,
                        book=ResultsCollector(objective), budget=budget,
                        train_size=TRAIN_SIZE,
                        brackets=HYPERBAND.brackets() if brackets is None else brackets,
                        sampler=sampler or Sampler())


def outcome(search: PackedSearch, leave_out: tuple[str, ...] = ("checkpoint",)) -> dict:
    """Each trial's status and rungs without the ``leave_out`` keys."""
    return {i: (t.status, [{k: v for k, v in r.to_dict().items() if k not in leave_out}
                           for r in t.rungs])
            for i, t in search.trials.items()}
