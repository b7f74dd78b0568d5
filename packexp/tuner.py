"""Packed Hyperband's execution: each rung's trials packed, trained, scored and journaled."""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError
from packexp.executors import Executor, LocalExecutor, PackJob
from packexp.hyperband import Bracket, steps_for
from packexp.journal import Journal
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, RungContext, Strategy
from packexp.tracking import Tracker

log = logging.getLogger(__name__)

STATUS = {"killed": "KILLED", "failed": "FAILED", "finished": "FINISHED"}


@dataclass
class PackedSearch:
    """Hyperband's callbacks: sample a bracket; pack, train and score one rung.

    Every member's result and checkpoint go to the journal as soon as its pack is done, so a
    resumed search (``replay``) skips them. A promoted trial continues from its checkpoint
    when ``continue_on_promotion``; otherwise it retrains from scratch. Either way its data
    order and updates are the same, so the scores are too.
    """

    space: SearchSpace
    strategy: Strategy
    capacity: Capacity
    cache: Any  # packing.cache.PackCache
    tracker: Tracker
    journal: Journal
    checkpoints: Path
    seed: int
    tags: Mapping[str, str]
    continue_on_promotion: bool = True
    lr_horizon: float | None = None  # epochs where schedules end; None: each rung's budget
    capacity_source: str = "capacity"
    progress: Any = None
    probe_seconds: Callable[[], float] = lambda: 0.0  # memory probes' time so far
    train_size: int = 0  # training examples: a rung's steps per trial, for the strategy
    brackets: list[Bracket] = field(default_factory=list)  # the whole search, for the strategy
    started: float = field(default_factory=time.perf_counter)
    first_pack_at: float | None = None  # time.time() when the first pack began
    trials: dict[str, dict] = field(default_factory=dict)
    packs: list[dict] = field(default_factory=list)
    _last: dict[int, list[str]] = field(default_factory=dict)
    _done: dict[tuple[int, int], dict[str, dict]] = field(default_factory=dict)
    _plans: dict[tuple[int, int], list[list[str]]] = field(default_factory=dict)
    _states: dict[str, Any] = field(default_factory=dict)  # trial_id -> MemberState
    _probed: float = 0.0
    executor: Executor | None = None  # where packs train; None: this process

    def __post_init__(self) -> None:
        if self.executor is None:
            self.executor = LocalExecutor().start(self.cache)

    def replay(self, records: list[dict]) -> int:
        """Loads a killed run's finished work from its journal; returns the members found."""
        for r in records:
            if r["event"] == "result":
                self._done.setdefault((r["bracket"], r["rung"]), {})[r["trial_id"]] = r
            elif r["event"] == "pack":
                self.packs.append(r["pack"])
            elif r["event"] == "plan":
                self._plans.setdefault((r["bracket"], r["rung"]),
                                       (r["packs"], r.get("fusion") or [None] * len(r["packs"])))
        return sum(len(v) for v in self._done.values())

    def sample(self, bracket: Bracket) -> list[Trial]:
        trials = self.space.sample(bracket.rungs[0].n, self.seed, bracket.s)
        if len(trials) < bracket.rungs[0].n:
            log.warning("bracket %d wants %d configurations; the space has only %d",
                        bracket.s, bracket.rungs[0].n, len(trials))
        for t in trials:
            self.trials[t.trial_id] = {"trial_id": t.trial_id, "hparams": dict(t.hparams),
                                       "bracket": bracket.s, "status": "running",
                                       "rungs": [], "packs": []}
        return trials

    def train_rung(
        self, bracket: Bracket, rung: int, trials: list[Trial], epochs: float
    ) -> dict[str, float | None]:
        ids = [t.trial_id for t in trials]
        for dropped in set(self._last.get(bracket.s, [])) - set(ids):
            self._retire(dropped, "killed")
        self._last[bracket.s] = ids
        done = self._done.get((bracket.s, rung), {})
        for trial_id in ids:
            if trial_id in done:
                self._add_result(done[trial_id])
        todo = [t for t in trials if t.trial_id not in done]
        scores = {i: done[i]["val_accuracy"] for i in ids if i in done}
        if todo:
            check_fits(todo, self.capacity, self.capacity_source)
            context = self._context(todo, epochs, bracket, rung)
            numbered = self._planned(bracket.s, rung, todo)
            if numbered is None:
                planned = self.strategy.plan(todo, self.capacity, context)
                check_partition(todo, [g for g, _ in planned], self.capacity)
                self.journal.append("plan", bracket=bracket.s, rung=rung,
                                    packs=[[t.trial_id for t in g] for g, _ in planned],
                                    fusion=[f for _, f in planned])
                numbered = [(j, g, f) for j, (g, f) in enumerate(planned)]
            groups = [g for _, g, _ in numbered]
            self.tracker.log_rung_plan(bracket.s, rung, epochs, groups, sorted(done))
            log.info("bracket %d rung %d: %d trials to %.3g epochs in %d packs%s",
                     bracket.s, rung, len(todo), epochs, len(groups),
                     f" ({len(done)} done before the resume)" if done else "")
            if self.progress:
                self.progress.rung(bracket.s, rung, len(groups), epochs)
            jobs = [PackJob(f"b{bracket.s}-r{rung}-p{j:02d}", group, epochs,
                            {t.trial_id: self._state_for(t) for t in group}, fusion,
                            self.lr_horizon, checkpoint=self._checkpoints(bracket, rung))
                    for j, group, fusion in numbered]
            predicted: dict[int, float | None] = {}

            def started(k: int) -> None:
                group, fusion = numbered[k][1], numbered[k][2]
                if self.progress:
                    self.progress.pack(k, len(group))
                if self.first_pack_at is None:
                    self.first_pack_at = time.time()
                predicted[k] = None
                if self.strategy.needs_costs:  # predicted with the caches as they stand now
                    view = self.executor.view()
                    predicted[k] = self.strategy.predict(group, fusion, dataclasses.replace(
                        context, kept=view.kept, members=view.members,
                        replayed=view.replayed))

            for k, runs in self.executor.run(jobs, started):
                for part, pack_run in enumerate(runs):
                    pack_id = jobs[k].key + (f"-{part}" if len(runs) > 1 else "")
                    scores.update(self._finish_pack(bracket, rung, epochs, pack_id, pack_run,
                                                    predicted[k] if len(runs) == 1 else None))
        if rung == len(bracket.rungs) - 1:
            for trial_id in ids:
                if self.trials[trial_id]["status"] == "running":
                    self._retire(trial_id, "finished")
        return scores

    def _context(self, todo: list[Trial], epochs: float, bracket: Bracket,
                  rung: int) -> RungContext:
        """What strategies that weigh costs know of the rung: each trial's steps, what the
        cache keeps, and how much of the search is still to come."""
        steps = {}
        for t in todo:
            start = 0
            rungs = self.trials[t.trial_id]["rungs"]
            if rungs and self.continue_on_promotion and rungs[-1]["checkpoint"]:
                start = rungs[-1]["steps"]
            total = steps_for(epochs, int(t.hparams["batch_size"]), self.train_size or 1)
            steps[t.trial_id] = max(0, total - start)
        view = self.executor.view()  # where packs train: one cache, or each worker's
        future = sum(r.n for r in bracket.rungs[rung + 1:]) + sum(
            r.n for b in self.brackets if b.s < bracket.s for r in b.rungs)
        return RungContext(steps, view.kept, view.members,
                           checkpoint=rung + 1 < len(bracket.rungs) and self.continue_on_promotion,
                           future_trials=future,
                           structures=self.space.count_structures(self.cache.model_runtime),
                           replayed=view.replayed, model_runtime=self.cache.model_runtime,
                           bucketed=self.cache.bucketed)

    def _planned(self, bracket: int, rung: int,
                 todo: list[Trial]) -> list[tuple[int, list[Trial], str | None]] | None:
        """The journaled packs of an interrupted rung still to train, each with its number in
        the rung's plan (so its ``pack_id`` is the one an unbroken run gives it).

        A pack's results are journaled together, so its members are all done or all to do;
        rebuilding the same packs gives a resumed run exactly the numbers of an unbroken one,
        fused packs included.
        """
        journaled = self._plans.get((bracket, rung))
        if journaled is None:
            return None
        plan, fusion = journaled
        by_id = {t.trial_id: t for t in todo}
        groups = [(j, [by_id[i] for i in pack if i in by_id], f)
                  for j, (pack, f) in enumerate(zip(plan, fusion, strict=True))]
        groups = [(j, g, f) for j, g, f in groups if g]
        if sorted(t.trial_id for _, g, _ in groups for t in g) != sorted(by_id):
            return None
        return groups

    def finish(self) -> None:
        for trial_id, record in self.trials.items():
            if record["status"] == "running":
                self._retire(trial_id, "killed")

    def best(self) -> dict | None:
        """The trial and rung with the highest validation accuracy seen."""
        scored = [(r["val_accuracy"], r["epochs"], t) for t in self.trials.values()
                  for r in t["rungs"] if r["val_accuracy"] is not None]
        if not scored:
            return None
        acc, epochs, trial = max(scored, key=lambda s: (s[0], s[1]))
        return {"trial_id": trial["trial_id"], "hparams": trial["hparams"],
                "val_accuracy": acc, "epochs": epochs}

    def _state_for(self, trial: Trial) -> Any:
        """The trial's starting state for this rung: None to start afresh, else the state it
        ended its last rung in: kept in memory, or the path of its checkpoint (after a
        resume, or written by a worker), which whoever trains the pack reads."""
        rungs = self.trials[trial.trial_id]["rungs"]
        if not (rungs and self.continue_on_promotion and rungs[-1]["checkpoint"]):
            return None  # a failed member keeps no checkpoint: it starts again, as it did
        return self._states.get(trial.trial_id, rungs[-1]["checkpoint"])

    def _checkpoints(self, bracket: Bracket, rung: int) -> bool:
        """Whether the rung's end states are continued from (by the next rung)."""
        return self.continue_on_promotion and rung + 1 < len(bracket.rungs)


    def _finish_pack(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
                     pack_run: Any, predicted_s: float | None = None) -> dict[str, float | None]:
        from packexp.packing.member import write_state

        stats, members = pack_run.stats, pack_run.members
        t0 = time.perf_counter()
        checkpoints: dict[str, str | None] = {}
        for m in members:
            self._states.pop(m.trial_id, None)
            checkpoints[m.trial_id] = m.checkpoint  # a worker's, already durable
            if m.state is not None and not m.failed and self._checkpoints(bracket, rung):
                # Durable before the journal names it; the next rung reads the memory copy.
                checkpoints[m.trial_id] = write_state(
                    m.state, self.checkpoints / m.trial_id / f"r{rung}")
                self._states[m.trial_id] = m.state
        now = time.perf_counter()
        probed = self.probe_seconds()
        pack = {
            "pack_id": pack_id, "bracket": bracket.s, "rung": rung, "epochs": epochs,
            "members": [m.trial_id for m in members], "fused": stats.fused,
            "xla": stats.xla, "grouped_conv": stats.grouped_conv, "reused": pack_run.reused,
            "reused_members": pack_run.reused_members, "steps": stats.steps,
            "build_s": round(pack_run.build_s, 4), "trace_s": round(stats.trace_s, 4),
            "train_s": round(stats.train_s, 4), "eval_s": round(pack_run.eval_s, 4),
            "checkpoint_s": round(now - t0, 4), "probe_s": round(probed - self._probed, 4),
            "duration_s": round(now - pack_run.started, 4),
            "predicted_s": None if predicted_s is None else round(predicted_s, 4),
            "programs": stats.programs, "eval_programs": stats.eval_programs,
            "switches": stats.switches,
            "switch_overhead_s": round(stats.switch_overhead_s, 4),
            "step_time_ms": stats.step_time_ms,
            "peak_memory_mb": round(pack_run.peak_memory_bytes / 2**20, 2),
            "planned_cost_mb": round(
                sum(self.capacity.cost(m.trial) for m in members) / 2**20, 2),
            "splits": pack_run.splits,
            "started_s": round(pack_run.started - self.started, 4),
            "elapsed_s": round(now - self.started, 4),
        }
        self._probed = probed
        scores: dict[str, float | None] = {}
        for m in members:
            ev = pack_run.evaluation[m.trial_id]
            checkpoint = checkpoints[m.trial_id]
            result = {
                "trial_id": m.trial_id, "bracket": bracket.s, "rung": rung, "epochs": epochs,
                "steps": m.step, "val_accuracy": ev.val_accuracy, "val_loss": ev.val_loss,
                "train_loss": m.train_loss if m.train_loss is not None
                and math.isfinite(m.train_loss) else None,
                "pack_id": pack_id, "checkpoint": checkpoint, "failed": m.failed,
            }
            self.journal.append("result", **result)
            for old in (self.checkpoints / m.trial_id).glob(f"r{rung - 1}.*"):
                old.unlink(missing_ok=True)
            before = self.trials[m.trial_id]["rungs"]
            if before and before[-1]["checkpoint"] not in (None, checkpoint):
                Path(before[-1]["checkpoint"]).unlink(missing_ok=True)
            self._add_result(result)
            scores[m.trial_id] = ev.val_accuracy
            rungs = self.trials[m.trial_id]["rungs"]
            self.tracker.log_trial_rung(
                m.trial_id, m.trial.hparams,
                {**self.tags, "bracket": bracket.s, "rung": rung, "pack_id": pack_id,
                 "fused": str(stats.fused).lower(), "xla": str(stats.xla).lower(),
                 "grouped_conv": stats.grouped_conv,
                 "promoted_from": rungs[-2]["pack_id"] if len(rungs) > 1 else None},
                epochs,
                {"val_accuracy": ev.val_accuracy, "val_loss": ev.val_loss,
                 "train_loss": result["train_loss"], "steps": m.step,
                 "step_time_ms": stats.step_time_ms, "peak_memory_mb": pack["peak_memory_mb"],
                 "members": len(members), "switch_overhead_s": pack["switch_overhead_s"]},
            )
        self.journal.append("pack", pack=pack, elapsed_s=time.perf_counter() - self.started)
        self.packs.append(pack)
        self.tracker.log_pack(len(self.packs) - 1, pack, (self.best() or {}).get("val_accuracy"))
        if self.progress:
            self.progress.advance()
        return scores

    def _add_result(self, result: dict) -> None:
        record = self.trials[result["trial_id"]]
        record["rungs"].append({k: result[k] for k in (
            "rung", "epochs", "steps", "val_accuracy", "val_loss", "train_loss", "pack_id",
            "checkpoint")})
        record["packs"].append(result["pack_id"])
        if result["failed"]:
            self._retire(result["trial_id"], "failed")

    def _retire(self, trial_id: str, status: str) -> None:
        record = self.trials[trial_id]
        if record["status"] != "running":
            return
        record["status"] = status
        self.tracker.end_trial(trial_id, STATUS[status])
        # Checkpoints exist only to continue from; a retired trial never continues.
        shutil.rmtree(self.checkpoints / trial_id, ignore_errors=True)
        for r in record["rungs"]:
            if r["checkpoint"]:
                Path(r["checkpoint"]).unlink(missing_ok=True)
        self._states.pop(trial_id, None)


def journaled_checkpoints(records: list[dict]) -> set[str]:
    """The checkpoints a resumed search may continue from: each trial's last journaled one."""
    last = {r["trial_id"]: r["checkpoint"] for r in records if r["event"] == "result"}
    return {path for path in last.values() if path}


def check_fits(trials: list[Trial], capacity: Capacity, source: str) -> None:
    """A member that cannot fit even alone is a config error naming both numbers."""
    for t in trials:
        if not capacity.fits([t]):
            raise ConfigError(
                f"{source}: {capacity.limit / 2**20:.2f} MB is smaller than one member "
                f"({t.trial_id}, batch {t.hparams['batch_size']}, needs "
                f"{capacity.cost(t) / 2**20:.1f} MB)")


def check_partition(trials: list[Trial], packs: list[list[Trial]], capacity: Capacity) -> None:
    """Guards the strategy contract: each trial in exactly one pack, none over capacity."""
    placed = sorted(t.trial_id for p in packs for t in p)
    if placed != sorted(t.trial_id for t in trials):
        raise RuntimeError("strategy returned packs that do not hold each trial exactly once")
    if any(len(p) > 1 and not capacity.fits(p) for p in packs):
        raise RuntimeError("strategy returned a pack over capacity")
