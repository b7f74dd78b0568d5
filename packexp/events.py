"""What a search tells the world: typed events, the records they carry, and their listeners.

The search (``packexp/runner/search.py``) emits one event per step of the search, in order, to a
list of listeners: the journal, the tracker, the progress display and the results
collector are listeners (``packexp/listeners/``), and so is any a user adds under
``listeners:`` in the config. A listener overrides the handlers it needs; the others do
nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from packexp.space import Trial


@dataclass(frozen=True)
class RungResult:
    """One trial's result after one rung: a ``result`` record in the journal.

    Attributes:
        epochs: Epochs the trial has trained in all.
        steps: Its training steps in all.
        checkpoint: Where its end state is kept for the next rung; None when none is.
        failed: Its loss diverged; it trains no further.
    """

    trial_id: str
    bracket: int
    rung: int
    epochs: float
    steps: int
    val_accuracy: float | None
    val_loss: float | None
    train_loss: float | None
    pack_id: str
    checkpoint: str | None
    failed: bool = False
    val_mse: float | None = None  # a regression's metrics (``val_loss`` is its MSE too)
    val_mae: float | None = None
    val_r2: float | None = None
    params: int | None = None  # the member's parameter count, where the objective ranks by it
    flops: int | None = None  # its FLOPs per example, likewise
    metrics: dict[str, float] | None = None  # the model's own metrics, ``val_<name>``

    def to_dict(self) -> dict[str, Any]:
        """Its fields; a regression's metrics and the parameter count only where recorded (a
        classification's records ranked by accuracy stay as they were)."""
        return {k: v for k, v in shallow(self).items()
                if v is not None or k not in WHERE_RECORDED}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> RungResult:
        return cls(**{f.name: record[f.name] for f in dataclasses.fields(cls)
                      if f.name in record})


WHERE_RECORDED = ("val_mse", "val_mae", "val_r2", "params", "flops", "metrics")  # or absent


def shallow(record: Any) -> dict[str, Any]:
    """A record's fields as a dict, each list or dict copied one level down: what
    ``dataclasses.asdict`` gives for records of plain values, without its deep recursion (a
    journal line per result and pack)."""
    return {f.name: _copied(getattr(record, f.name)) for f in dataclasses.fields(record)}


def _copied(value: Any) -> Any:
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class PackRecord:
    """One trained pack: its members, settings and time by phase (README, "Results").

    Its dict form (``to_dict``) is a ``pack`` record of the journal and an entry of
    ``results.json``'s ``packs``; ``from_dict`` reads either back, records of older runs
    (missing fields) included.
    """

    pack_id: str
    bracket: int
    rung: int
    epochs: float
    members: list[str]
    fused: bool = False
    looped: bool = False  # a plain pack run by its architecture's looped program
    xla: bool = False
    grouped_conv: str | None = None
    reused: bool = False
    reused_members: int = 0
    steps: int = 0
    build_s: float = 0.0
    trace_s: float = 0.0
    train_s: float = 0.0
    read_s: float = 0.0  # waiting for a streamed dataset's blocks: reading and decoding
    eval_s: float = 0.0
    checkpoint_s: float = 0.0
    probe_s: float = 0.0
    duration_s: float = 0.0
    predicted_s: float | None = None
    programs: int = 0
    eval_programs: int = 0
    switches: int = 0
    switch_overhead_s: float = 0.0
    step_time_ms: float | None = None
    peak_memory_mb: float = 0.0  # how far the peak rose over the pack, on its device
    planned_cost_mb: float = 0.0  # its members' memory, as the strategy planned with it
    peak_rss_mb: float | None = None  # the peak resident set of the process it trained in
    gpu_peak_memory_mb: float | None = None  # peak_memory_mb on a GPU; None on a CPU
    splits: int = 0
    started_s: float | None = None
    elapsed_s: float | None = None
    epochs_spent: float = 0.0  # epochs its members trained here, summed (promotions: the rest)
    session: int | None = None  # 0 for the run's first session, then one more per resume
    worker: int | None = None  # under executor=ray: the worker that trained it,
    node: str | None = None  # its Ray node's id
    host: str | None = None  # and that node's address

    # A pack's time by phase, in its record and summed over the search (README).
    PHASES: ClassVar[tuple[str, ...]] = ("build_s", "trace_s", "train_s", "eval_s",
                                         "checkpoint_s", "probe_s")

    @classmethod
    def measured(cls, pack_run: Any, pack_id: str, bracket: int, rung: int, epochs: float, *,
                 predicted_s: float | None, checkpoint_s: float, probe_s: float,
                 epochs_spent: float, planned_cost_bytes: float, search_started: float,
                 session: int) -> PackRecord:
        """The record of a pack as it ran (``packing.trainer.PackRun``); its start and end on
        the search's clock (``search_started``: ``Executor.clock()``, ``time.perf_counter()``
        unless the clock is a simulation's). It ends now, or when its worker handed it back
        (``PackRun.ended``): a Ray worker's pack that finished before an earlier one in the
        plan waits to be published, and that wait is not its."""
        stats, members = pack_run.stats, pack_run.members
        now = getattr(pack_run, "ended", None)
        if now is None:  # not ``or``: a simulated clock's first pack may end at 0.0
            now = time.perf_counter()
        return cls(
            pack_id=pack_id, bracket=bracket, rung=rung, epochs=epochs,
            members=[m.trial_id for m in members], fused=stats.fused, looped=stats.looped,
            xla=stats.xla, grouped_conv=stats.grouped_conv, reused=pack_run.reused,
            reused_members=pack_run.reused_members, steps=stats.steps,
            build_s=round(pack_run.build_s, 4), trace_s=round(stats.trace_s, 4),
            train_s=round(stats.train_s, 4), read_s=round(stats.read_s, 4),
            eval_s=round(pack_run.eval_s, 4),
            checkpoint_s=round(checkpoint_s, 4), probe_s=round(probe_s, 4),
            duration_s=round(now - pack_run.started, 4),
            predicted_s=None if predicted_s is None else round(predicted_s, 4),
            programs=stats.programs, eval_programs=stats.eval_programs,
            switches=stats.switches, switch_overhead_s=round(stats.switch_overhead_s, 4),
            step_time_ms=stats.step_time_ms,
            peak_memory_mb=round(pack_run.peak_memory_bytes / 2**20, 2),
            planned_cost_mb=round(planned_cost_bytes / 2**20, 2), splits=pack_run.splits,
            peak_rss_mb=round(pack_run.peak_rss_bytes / 2**20, 2),
            gpu_peak_memory_mb=None if pack_run.gpu_peak_bytes is None
            else round(pack_run.gpu_peak_bytes / 2**20, 2),
            started_s=round(pack_run.started - search_started, 4),
            elapsed_s=round(now - search_started, 4), epochs_spent=epochs_spent,
            session=session, worker=getattr(pack_run, "worker", None),
            node=getattr(pack_run, "node", None), host=getattr(pack_run, "host", None))

    def to_dict(self) -> dict[str, Any]:
        return shallow(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> PackRecord:
        return cls(**{f.name: record[f.name] for f in dataclasses.fields(cls)
                      if f.name in record})


@dataclass(frozen=True)
class PlanRecord:
    """A rung's plan as the journal keeps it: each pack's trial ids and fusion setting; an
    asynchronous scheduler's plan also has its ``key`` and the configurations it drew
    (``sampled``: trial_id, hparams and seed of each)."""

    bracket: int
    rung: int
    packs: list[list[str]]
    fusion: list[str | None]
    key: str | None = None
    sampled: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, event: RungPlanned) -> PlanRecord:
        return cls(event.bracket, event.rung, [[t.trial_id for t in g] for g in event.packs],
                   list(event.fusion), event.key, None if event.key is None else [
                       {"trial_id": t.trial_id, "hparams": dict(t.hparams), "seed": t.seed}
                       for t in event.sampled])

    def to_dict(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        if self.key is None:
            del record["key"], record["sampled"]
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> PlanRecord:
        return cls(record["bracket"], record["rung"], record["packs"],
                   record.get("fusion") or [None] * len(record["packs"]), record.get("key"),
                   record.get("sampled"))


@dataclass(frozen=True)
class Best:
    """The trial and rung best by the search's objective, and the values it trained with; in
    a population, also the schedule (``schedulers.base.schedule``) that made its weights.
    ``value``: its objective's ``metric`` there (Optuna's ``best_value``). ``results.json``'s
    ``best`` is ``to_dict()``."""

    trial_id: str
    hparams: Mapping[str, Any]
    val_accuracy: float | None
    epochs: float  # whole epochs as an int: 3, not 3.0 (R=10 has 10/9)
    schedule: list[dict[str, Any]] | None = None
    metric: str = "val_accuracy"
    value: float | None = None

    def __post_init__(self) -> None:
        if self.value is None and self.metric == "val_accuracy":
            object.__setattr__(self, "value", self.val_accuracy)

    def to_dict(self) -> dict[str, Any]:
        out = {"trial_id": self.trial_id, "hparams": dict(self.hparams),
               "val_accuracy": self.val_accuracy, "epochs": self.epochs,
               "metric": self.metric, "value": self.value}
        if self.schedule is not None:
            out["schedule"] = self.schedule
        return out


@dataclass
class TrialRecord:
    """A trial across the search: its configuration, its results by rung and its end.

    ``status`` is ``running`` until it is cut by halving (``killed``), diverges
    (``failed``) or completes its bracket (``finished``). ``hparams`` are the values it was
    drawn with; a member of a population (``scheduler=pbt``) changes them when it copies
    another, and ``lineage`` lists each such exploit in order: ``{"epoch", "donor",
    "hparams", "before", "score", "donor_score"}``.
    """

    trial_id: str
    hparams: dict[str, Any]
    bracket: int
    status: str = "running"
    rungs: list[RungResult] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)

    def hparams_at(self, epochs: float) -> dict[str, Any]:
        """The values the trial trained with up to ``epochs``."""
        earlier = [e["hparams"] for e in self.lineage if e["epoch"] < epochs]
        return dict(earlier[-1] if earlier else self.hparams)

    @property
    def last(self) -> RungResult | None:
        return self.rungs[-1] if self.rungs else None

    def to_dict(self) -> dict[str, Any]:
        """``results.json``'s form: each rung without the trial's own keys."""
        rungs = [{k: v for k, v in r.to_dict().items()
                  if k not in ("trial_id", "bracket", "failed")} for r in self.rungs]
        record = {"trial_id": self.trial_id, "hparams": dict(self.hparams),
                  "bracket": self.bracket, "status": self.status, "rungs": rungs,
                  "packs": [r.pack_id for r in self.rungs]}
        if self.lineage:
            record["lineage"] = self.lineage
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> TrialRecord:
        """Reads ``to_dict``'s form back; a field it lacks takes its default (a rung's
        checkpoint, None)."""
        bracket = record.get("bracket", 0)
        rungs = [RungResult.from_dict({"checkpoint": None, **r, "bracket": bracket,
                                       "trial_id": record["trial_id"]})
                 for r in record.get("rungs", ())]
        return cls(record["trial_id"], dict(record["hparams"]), bracket,
                   record.get("status", "running"), rungs, list(record.get("lineage", ())))


@dataclass(frozen=True)
class Exploit:
    """One member of a population replaced at an interval's end (``schedulers.pbt``): it
    takes ``donor``'s weights and optimizer state, and trains on with ``hparams`` (the
    donor's, explored)."""

    member: str
    donor: str
    hparams: Mapping[str, Any]
    before: Mapping[str, Any]  # the member's hyper-parameters until now
    score: float | None  # the member's objective value at the interval's end
    donor_score: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hparams": dict(self.hparams),
                "before": dict(self.before)}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Exploit:
        return cls(record["member"], record["donor"], dict(record["hparams"]),
                   dict(record["before"]), record.get("score"), record.get("donor_score"))


# Events, in the order a search emits them.

@dataclass(frozen=True)
class Event:
    #: The ``Listener`` method that handles it.
    handler: ClassVar[str] = ""


@dataclass(frozen=True)
class RungPlanned(Event):
    """A rung's trials still to train, grouped into packs (``fusion``: each pack's setting,
    None for the run's). ``done``: its trials a resume skips; ``journaled``: the plan was
    read back from the journal, not made now.

    Asynchronous halving plans a rung many times: each plan has its own ``key`` (its packs
    are ``<key>-p<j>``) and names the configurations it drew (``sampled``), which a resume
    cannot draw again, since they were drawn from the results known then."""

    handler: ClassVar[str] = "on_rung_planned"
    bracket: int
    rung: int
    epochs: float
    packs: Sequence[Sequence[Trial]]
    fusion: Sequence[str | None]
    done: Sequence[str] = ()
    journaled: bool = False
    key: str | None = None
    sampled: Sequence[Trial] = ()

    @property
    def name(self) -> str:
        """The plan's name: its packs are ``<name>-p<j>``."""
        return self.key or f"b{self.bracket}-r{self.rung}"


@dataclass(frozen=True)
class PackStarted(Event):
    """A planned pack is handed to where packs train (``index``: its place in the plan)."""

    handler: ClassVar[str] = "on_pack_started"
    index: int
    key: str
    members: Sequence[Trial]


@dataclass(frozen=True)
class MemberScored(Event):
    """A member of a finished pack, scored; its checkpoint is durable already.

    ``tags``: the run's names (strategy, model, dataset); ``promoted_from``: the pack the
    trial trained in at its rung before; ``memory_mb``: the member's memory as the strategy
    planned with it (estimated, scaled by a measured probe where one ran)."""

    handler: ClassVar[str] = "on_member_scored"
    result: RungResult
    trial: Trial
    pack: PackRecord
    tags: Mapping[str, str] = field(default_factory=dict)
    promoted_from: str | None = None
    memory_mb: float | None = None


@dataclass(frozen=True)
class PackFinished(Event):
    """A pack whose members are all scored; ``best``: the search's best value so far of its
    objective's ``metric``; ``epochs_spent``: the epochs every pack so far trained, summed
    (the search's budget used)."""

    handler: ClassVar[str] = "on_pack_finished"
    pack: PackRecord
    index: int
    best: float | None = None
    epochs_spent: float | None = None
    metric: str = "val_accuracy"


@dataclass(frozen=True)
class MembersExploited(Event):
    """A population's interval ``rung`` has ended at ``epochs``: ``exploits`` say which
    members copy which, and ``hparams`` are every member's values for the next interval.
    Journaled before any of it takes effect; ``journaled``: read back by a resume."""

    handler: ClassVar[str] = "on_members_exploited"
    bracket: int
    rung: int
    epochs: float
    exploits: Sequence[Exploit]
    hparams: Mapping[str, Mapping[str, Any]]
    journaled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The journal's ``exploit`` record."""
        return {"bracket": self.bracket, "rung": self.rung, "epochs": self.epochs,
                "exploits": [e.to_dict() for e in self.exploits]}


@dataclass(frozen=True)
class TrialEnded(Event):
    """A trial trains no further: ``killed`` (cut by halving), ``failed`` or ``finished``."""

    handler: ClassVar[str] = "on_trial_ended"
    trial_id: str
    status: str


@dataclass(frozen=True)
class SearchFinished(Event):
    """The search is over and ``results.json`` written: its ``records.SearchResult``
    (``result.stopped``: why it stopped early, its budget; None when it ran to its end)."""

    handler: ClassVar[str] = "on_search_finished"
    result: Any  # records.search_result.SearchResult

    @property
    def wall_time_s(self) -> float:
        return self.result.wall_time_s

    @property
    def stopped(self) -> str | None:
        return self.result.stopped


@dataclass(frozen=True)
class Summary(Event):
    """Figures and files a task records on its run (a profile's table, a search's plots)."""

    handler: ClassVar[str] = "on_summary"
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    artifacts: Sequence[tuple[Path, str | None]] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class Listener:
    """Receives a search's events; each handler does nothing unless overridden."""

    def on_rung_planned(self, event: RungPlanned) -> None:
        pass

    def on_pack_started(self, event: PackStarted) -> None:
        pass

    def on_member_scored(self, event: MemberScored) -> None:
        pass

    def on_pack_finished(self, event: PackFinished) -> None:
        pass

    def on_members_exploited(self, event: MembersExploited) -> None:
        pass

    def on_trial_ended(self, event: TrialEnded) -> None:
        pass

    def on_search_finished(self, event: SearchFinished) -> None:
        pass

    def on_summary(self, event: Summary) -> None:
        pass


class Listeners:
    """Several listeners as one: each event goes to each, in the order given."""

    def __init__(self, listeners: Iterable[Listener] = ()) -> None:
        self.listeners = list(listeners)

    def emit(self, event: Event) -> None:
        for listener in self.listeners:
            getattr(listener, event.handler)(event)
