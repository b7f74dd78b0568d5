"""An executor trains a rung's planned packs and hands them back in plan order."""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from packexp.errors import ExecutorError
from packexp.space import Trial

if TYPE_CHECKING:
    from packexp.packing.runs import PackRun
    from packexp.strategies import Capacity
    from packexp.telemetry import DeviceFacts

__all__ = ["ATTEMPTS", "CacheView", "DeviceReport", "Executor", "ExecutorError", "PackJob",
           "Trainer", "discard_attempts"]


@dataclass(frozen=True)
class PackJob:
    """One planned pack, as ``packing.trainer.train_group`` takes it.

    ``states`` hold each member's starting state: a ``MemberState`` in memory, a checkpoint
    path, or None for a fresh trial. ``checkpoint`` says whether the members' end states
    are needed again (a later rung continues from them).
    """

    key: str
    group: Sequence[Trial]
    epochs: float
    states: Mapping[str, Any]
    fusion: str | None = None
    lr_horizon: float | None = None
    checkpoint: bool = False


@dataclass(frozen=True)
class CacheView:
    """What a place's ``PackCache`` keeps for reuse, as a cost-weighing strategy plans with it
    (``strategies.RungContext``).

    Attributes:
        kept: Pack structures set up and kept.
        members: Member structures to how many built members of each are kept.
        replayed: Member structures whose fresh initial weights replay unbuilt.
    """

    kept: frozenset[tuple] = frozenset()
    members: Mapping[tuple, int] = field(default_factory=dict)
    replayed: frozenset[tuple] = frozenset()

    @classmethod
    def of(cls, cache: Any) -> CacheView:
        kept, members = cache.kept()
        return cls(frozenset(kept), dict(members), frozenset(cache.replayed))

    @classmethod
    def merged(cls, views: Iterable[CacheView]) -> CacheView:
        """Several workers' caches as one: a pack goes to one worker, so a structure counts
        the members of the worker that keeps most of it, not their sum."""
        views = list(views)
        members: dict[tuple, int] = {}
        for view in views:
            for key, n in view.members.items():
                members[key] = max(members.get(key, 0), n)
        return cls(frozenset().union(*(v.kept for v in views)), members,
                   frozenset().union(*(v.replayed for v in views)))

    def affinity(self, key: tuple, member_keys: Sequence[tuple]) -> tuple[bool, int, int]:
        """How much of a pack (its structure ``key`` and its members' structures) this cache
        could set up without building: higher is more; compared as a tuple."""
        left = dict(self.members)
        built = 0
        for k in member_keys:
            if left.get(k, 0) > 0:
                left[k] -= 1
                built += 1
        return key in self.kept, built, sum(k in self.replayed for k in member_keys)


@dataclass(frozen=True)
class DeviceReport:
    """The device packs train on, as the search plans for it (``Trainer.prepare_device``).

    Attributes:
        capacity: One pack's capacity.
        source: The setting it comes from (``device.memory_budget_mb=...``, ``fake trainer``).
        probe_seconds: The memory probes' clock: their seconds so far (a pack planned later
            may still probe).
        memory_probes: Where the probes the search planned with came from, as
            ``results.json`` records it (``config.device.ProbeFiles.summary``); None for none.
        calibration_s: The seconds the strategy took to ready itself for the device.
    """

    capacity: Capacity
    source: str
    probe_seconds: Callable[[], float] = lambda: 0.0
    memory_probes: Callable[[], dict[str, str] | None] = lambda: None
    calibration_s: float = 0.0


class Trainer(Protocol):
    """The seam between the search and what trains its packs: every call the search makes of
    it. An executor takes one (``Executor(trainer=...)``); the search, its ledger and
    checkpoint store keep states through it. ``packing.TensorFlowTrainer`` is the default;
    ``packexp.testing.FakeTrainer`` scores members without TensorFlow, for tests and scheduler
    research.

    The device is the trainer's to answer for: a job has it start what trains (``start``);
    the search has it ready this process (``set_up``), build the cache packs train with
    (``cache``), tell the device's facts (``device_facts``) and one pack's capacity
    (``prepare_device``), each given the search's parts (``parts``: ``config.Components``).
    TensorFlow's trainer hands these to the parts, which measure the device where packs
    train (memory probes, calibrations); a trainer that measures none answers them itself.
    """

    name: str
    #: Whether the device is measured where packs train (``executors.ray``'s actors measure
    #: theirs, so they take no other trainer).
    measures_device: bool
    checkpoint_suffix: str  # the suffix ``write_state`` gives a state file

    def start(self, tensorflow: Callable[[], None]) -> None:
        """Starts what trains packs in this process before a job's task runs
        (``app.main.job``); ``tensorflow`` starts TensorFlow as the command does."""

    def set_up(self, parts: Any, probe: bool) -> None:
        """Readies this process to train the packs of ``parts`` (``Components.build``); with
        ``probe``, checks the model builds for every value of its hyper-parameters."""

    def cache(self, parts: Any, dataset: Any) -> Any:
        """The cache this process trains packs of ``dataset`` with (``Components.cache``)."""

    def device_facts(self, parts: Any, executor: Executor) -> DeviceFacts:
        """The device packs train on (with ``executor``), as ``results.json`` tags it."""

    def prepare_device(self, parts: Any, cache: Any, executor: Executor, facts: DeviceFacts,
                       run_dir: Path) -> DeviceReport:
        """One pack's capacity on the device ``facts`` names, and the strategy readied for
        it: a strategy that weighs costs calibrated (``WeighsCosts.prepare``)."""

    def train_group(self, group: Sequence[Trial], cache: Any, epochs: float,
                    states: Mapping[str, Any], fusion: str | None = None,
                    lr_horizon: float | None = None) -> list[PackRun]:
        """Trains ``group`` as one pack to ``epochs``; returns its pack runs (one, or more
        when it was split), typed without TensorFlow (``packing.runs``)."""

    def read_state(self, path: str | Path) -> Any: ...

    def write_state(self, state: Any, path: str | Path) -> str:
        """Writes ``state`` whole to ``path`` plus ``checkpoint_suffix``; returns the path."""

    def member_state(self, weights: Any, slots: Any, step: int,
                     fresh_slots: bool = False) -> Any: ...

    def export(self, trial: Trial, state: Any, cache: Any, run_dir: Path,
               name: str | None = None) -> Any:
        """Writes ``trial``'s model in ``state`` under ``run_dir/models``; returns its
        ``packing.export.Kept``'s shape (``file``, ``whole``, ``why``)."""


def tensorflow_trainer() -> Trainer:
    """The default trainer: TensorFlow's pack engine (loaded when it first trains)."""
    from packexp.packing.engine import TensorFlowTrainer

    return TensorFlowTrainer()


class Executor(abc.ABC):
    """Trains packs for the search's driver, which alone journals and tracks them.

    Args:
        cfg: The run's composed config (workers build their data and members from it).
        run_dir: The run directory.
        trainer: What trains the packs (``Trainer``); TensorFlow's when None.
    """

    #: Whether packs train in this process: if not, the driver leaves the GPU to workers.
    trains_here: ClassVar[bool] = True

    def __init__(self, cfg: Any = None, run_dir: str | Path | None = None,
                 trainer: Trainer | None = None) -> None:
        self.cfg = cfg
        self.trainer = trainer if trainer is not None else tensorflow_trainer()
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.cache: Any = None
        self._running: dict[int, PackJob] = {}  # submitted, not yet returned (by identity)
        self._worked: list[tuple[float, float]] = []  # each pack's (start, end) on its worker

    def start(self, cache: Any) -> Executor:
        """Readies the executor; ``cache`` is the driver's ``PackCache``."""
        self.cache = cache
        return self

    #: Packs that can train at once: workers.
    workers: ClassVar[int] = 1

    #: Whether the clock is a simulation's (``executors.simulated``): the search's times,
    #: each pack's start and duration are then predictions, not measurements.
    simulated: ClassVar[bool] = False

    def clock(self) -> float:
        """The search's clock, in seconds: ``time.perf_counter()`` where packs really train;
        a simulated executor's own clock, which its packs' ``started`` and ``ended`` are on."""
        return time.perf_counter()

    def run(self, jobs: Sequence[PackJob],
            on_start: Callable[[int], None] = lambda k: None) -> Iterator[tuple[int, list]]:
        """Trains ``jobs``; yields ``(index, pack runs)`` in plan order (``jobs`` order).

        ``on_start(index)`` is called as each job is dispatched. Pack runs are
        ``packing.trainer.PackRun``s; a member's ``checkpoint`` is set when a worker wrote
        its state (then ``state`` is None)."""
        todo = list(range(len(jobs)))
        done: dict[int, list] = {}
        published = 0
        index = {id(job): k for k, job in enumerate(jobs)}
        try:
            while published < len(jobs):
                while self.free() and todo:
                    k = todo.pop(0)
                    on_start(k)
                    self.submit(jobs[k])
                job, runs = self.next_done()
                done[index[id(job)]] = runs
                while published in done:
                    yield published, done.pop(published)
                    published += 1
        finally:
            self.cancel()

    def free(self) -> int:
        """Workers with nothing to train (none while a shrunk pool has more in flight)."""
        return max(0, self.workers - len(self._running))

    def busy(self) -> bool:
        return bool(self._running)

    def submit(self, job: PackJob) -> None:
        """Hands ``job`` to a free worker (``free()`` must be positive)."""
        if not self.free():
            raise RuntimeError("submit: no worker is free")
        self._running[id(job)] = job
        self._dispatch(job)

    def next_done(self) -> tuple[PackJob, list]:
        """Waits for a submitted job to finish; returns it and its pack runs."""
        job, runs, worked = self._collect()
        del self._running[id(job)]
        self._worked.append(worked)
        return job, runs

    def usage(self) -> dict[str, Any]:
        """Workers' time this session: busy while a worker trained a pack (by its own clock,
        from taking the pack to handing its results back), over the span from the first
        pack's start to the last one's end; the rest is idle."""
        if not self._worked:
            return {"workers": self.workers, "busy_s": 0.0, "span_s": 0.0,
                    "idle_fraction": None}
        busy = sum(end - start for start, end in self._worked)
        span = max(end for _, end in self._worked) - min(start for start, _ in self._worked)
        return {"workers": self.workers, "busy_s": round(busy, 4), "span_s": round(span, 4),
                "idle_fraction": round(max(0.0, 1 - busy / (self.workers * span)), 4)
                if span > 0 else None}

    @abc.abstractmethod
    def _dispatch(self, job: PackJob) -> None:
        """Starts training ``job`` (a worker is free for it)."""

    @abc.abstractmethod
    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        """Blocks until one started job is trained; returns it, its pack runs, and when its
        worker took it and handed it back (``time.time()``)."""

    def cancel(self) -> None:
        """Gives up the jobs still in flight (the search failed or was interrupted)."""
        self._running.clear()

    def on_device(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Runs ``fn(cache, *args)`` where packs train, with that place's ``PackCache``: the
        device's memory limit, memory probes and a cost calibration are measured there.
        ``fn`` must be importable (a module's function) and its result plain data."""
        return fn(self.cache, *args)

    def place(self) -> dict[str, Any]:
        """Where packs train, as far as it changes their speed beyond the device: a cost
        calibration measured here holds only where this is the same."""
        return {"executor": "local"}

    def view(self) -> CacheView:
        """What the caches where packs train keep for reuse, as planning sees it now."""
        return CacheView.of(self.cache)

    def close(self) -> None:  # noqa: B027 (most executors hold nothing)
        """Releases workers; the search is over or has failed."""

    def discard(self, keep: set[str]) -> None:
        """Deletes workers' checkpoints that are not in ``keep`` (on resume): attempts that
        were killed, or whose pack was never journaled."""
        if self.run_dir is not None:
            discard_attempts(self.run_dir / ATTEMPTS, keep)


ATTEMPTS = "attempts"  # under a shared directory: one directory per attempt at a pack


def discard_attempts(root: Path, keep: set[str]) -> None:
    """Deletes the files under ``root``'s attempt directories not in ``keep``, then the
    directories left empty."""
    for path in root.glob("*/*"):
        if str(path) not in keep:
            path.unlink(missing_ok=True)
    prune_attempts(root)


def drop_other_attempts(root: Path, key: str, kept: set[str], journaled: set[str]) -> None:
    """Deletes the files of pack ``key``'s attempts under ``root`` other than those ``kept``
    (the one published), but for the checkpoints a resumed run's journal names
    (``journaled``). An attempt's worker killed a moment ago may still write: a file that
    will not go is left for ``discard_attempts`` on resume."""
    for other in root.glob(f"{key}.*"):
        if other.name in kept:
            continue
        with contextlib.suppress(OSError):
            for path in other.glob("*"):
                if str(path) not in journaled:
                    path.unlink(missing_ok=True)
            if not any(other.iterdir()):
                other.rmdir()


def prune_attempts(root: Path) -> None:
    for attempt in root.glob("*"):
        if attempt.is_dir() and not any(attempt.iterdir()):
            attempt.rmdir()
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()
