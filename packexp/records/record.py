"""A search's record, typed and frozen: rung results, trials, packs, plans and exploits."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar


class Status(StrEnum):
    """Where a trial stands: ``running`` until it is cut by halving (``killed``), diverges
    (``failed``) or completes its bracket (``finished``). A string too: ``results.json`` and
    the journal hold its value."""

    RUNNING = "running"
    KILLED = "killed"
    FAILED = "failed"
    FINISHED = "finished"


def whole(epochs: float) -> float:
    """Whole epochs as an int (3, not 3.0; R=10 has 10/9), as ``results.json`` states them."""
    return int(epochs) if float(epochs).is_integer() else epochs


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

    def recorded(self) -> dict[str, float]:
        """Every metric it recorded, by name (``METRIC_FIELDS`` where measured, then the
        model's own): what ``Best`` carries of its rung."""
        values = {k: v for k in METRIC_FIELDS if (v := getattr(self, k)) is not None}
        return {**values, **(self.metrics or {})}


WHERE_RECORDED = ("val_mse", "val_mae", "val_r2", "params", "flops", "metrics")  # or absent
# A rung's metrics: its validation and training scores, a regression's errors, and the
# parameter count and FLOPs where the objective ranks by them.
METRIC_FIELDS = ("val_accuracy", "val_loss", "train_loss", "val_mse", "val_mae", "val_r2",
                 "params", "flops")


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
        """The record of a pack as it ran (``packing.runs.PackRun``); its start and end on
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


@dataclass(frozen=True)
class Exploited:
    """An exploit as the member's lineage holds it: at ``epoch`` it took ``donor``'s state and
    trained on with ``hparams`` (``before``: its values until then)."""

    epoch: float
    donor: str
    hparams: Mapping[str, Any]
    before: Mapping[str, Any]
    score: float | None
    donor_score: float | None

    @classmethod
    def of(cls, epoch: float, exploit: Exploit) -> Exploited:
        return cls(epoch, exploit.donor, dict(exploit.hparams), dict(exploit.before),
                   exploit.score, exploit.donor_score)

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "donor": self.donor, "hparams": dict(self.hparams),
                "before": dict(self.before), "score": self.score,
                "donor_score": self.donor_score}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Exploited:
        return cls(record["epoch"], record["donor"], dict(record["hparams"]),
                   dict(record["before"]), record.get("score"), record.get("donor_score"))


@dataclass(frozen=True)
class TrialRecord:
    """A trial across the search: its configuration, its results by rung, its lineage and
    where it stands (``status``).

    ``hparams`` are the values it was drawn with; a member of a population
    (``scheduler=pbt``) changes them when it copies another, and ``lineage`` holds each such
    exploit in order. Frozen: the study keeps the newest (``scored``, ``ended``,
    ``exploited``)."""

    trial_id: str
    hparams: Mapping[str, Any]
    bracket: int
    status: Status = Status.RUNNING
    rungs: tuple[RungResult, ...] = ()
    lineage: tuple[Exploited, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "rungs", tuple(self.rungs))
        object.__setattr__(self, "lineage", tuple(
            e if isinstance(e, Exploited) else Exploited.from_dict(e) for e in self.lineage))

    def scored(self, result: RungResult) -> TrialRecord:
        """This trial with ``result`` its newest rung."""
        return TrialRecord(self.trial_id, self.hparams, self.bracket, self.status,
                           (*self.rungs, result), self.lineage)

    def ended(self, status: Status | str) -> TrialRecord:
        return TrialRecord(self.trial_id, self.hparams, self.bracket, status, self.rungs,
                           self.lineage)

    def exploited(self, step: Exploited) -> TrialRecord:
        """This trial after copying a donor's state: a failed one trains on from it."""
        status = Status.RUNNING if self.status == Status.FAILED else self.status
        return TrialRecord(self.trial_id, self.hparams, self.bracket, status, self.rungs,
                           (*self.lineage, step))

    def hparams_at(self, epochs: float) -> dict[str, Any]:
        """The values the trial trained with up to ``epochs``."""
        earlier = [e.hparams for e in self.lineage if e.epoch < epochs]
        return dict(earlier[-1] if earlier else self.hparams)

    @property
    def last(self) -> RungResult | None:
        return self.rungs[-1] if self.rungs else None

    def to_dict(self) -> dict[str, Any]:
        """``results.json``'s form: each rung without the trial's own keys."""
        rungs = [{k: v for k, v in r.to_dict().items()
                  if k not in ("trial_id", "bracket", "failed")} for r in self.rungs]
        record = {"trial_id": self.trial_id, "hparams": dict(self.hparams),
                  "bracket": self.bracket, "status": self.status.value, "rungs": rungs,
                  "packs": [r.pack_id for r in self.rungs]}
        if self.lineage:
            record["lineage"] = [e.to_dict() for e in self.lineage]
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
                   record.get("status", Status.RUNNING), tuple(rungs),
                   tuple(Exploited.from_dict(e) for e in record.get("lineage", ())))
