"""The search's events as the MLflow tracker's runs keep them: the handlers of a ``Listener``
that turn each event into the tracker's calls (``mlflow_tracker.MlflowTracker``)."""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from packexp.events import (
    MemberScored,
    MembersExploited,
    PackFinished,
    RungPlanned,
    SearchFinished,
    Summary,
    TrialEnded,
)
from packexp.records.record import PackRecord
from packexp.tracking.base import STATUS, Tracker


class MlflowEvents(Tracker):
    """A tracker's event handlers over the calls an MLflow tracker makes: ``log_rung_plan``,
    ``log_trial_rung``, ``log_pack``, ``end_trial``, ``log_metrics``, ``log_artifact``, and
    ``_post`` (one queued call to the writer) for the trial runs it has logged
    (``_logged``)."""

    _logged: set[str]
    _headline_first: bool  # a fresh parent run: its first metric is to be ``best_value``

    def on_rung_planned(self, event: RungPlanned) -> None:
        """The plan as an artifact. A fresh search's first one also logs ``best_value``, NaN
        until the search ends: the MLflow UI's compare view plots the first metric a run
        logged, which would otherwise be a pack's ``step_time_ms``."""
        if self._headline_first:
            self._headline_first = False
            self.log_metrics({"best_value": math.nan})
        self.log_rung_plan(event.bracket, event.rung, event.epochs, event.packs, event.done,
                           event.name)

    def on_member_scored(self, event: MemberScored) -> None:
        result, pack = event.result, event.pack
        self.log_trial_rung(
            result.trial_id, event.trial.hparams,
            {**event.tags, "bracket": result.bracket, "rung": result.rung,
             "pack_id": result.pack_id, "fused": str(pack.fused).lower(),
             # Under executor=ray, where the rung trained: the worker, its node and host.
             "worker": pack.worker, "node": pack.node, "host": pack.host,
             "xla": str(pack.xla).lower(), "grouped_conv": pack.grouped_conv,
             "promoted_from": event.promoted_from},
            result.epochs,
            {"val_accuracy": result.val_accuracy, "val_loss": result.val_loss,
             "train_loss": result.train_loss, "val_mse": result.val_mse,
             "val_mae": result.val_mae, "val_r2": result.val_r2, **(result.metrics or {}),
             "params": result.params, "flops": result.flops,  # where the objective ranks by
             "steps": result.steps,
             "step_time_ms": pack.step_time_ms, "member_memory_mb": event.memory_mb,
             "peak_rss_mb": pack.peak_rss_mb, "gpu_peak_memory_mb": pack.gpu_peak_memory_mb,
             "members": len(pack.members), "switch_overhead_s": pack.switch_overhead_s})

    def on_pack_finished(self, event: PackFinished) -> None:
        self.log_pack(event.index, event.pack, event.best, event.epochs_spent, event.metric)

    def on_members_exploited(self, event: MembersExploited) -> None:
        """A population's values as stepped metrics of each member's run, ``hparam_<name>``
        for each numeric one, at the epoch they train from (the first values at step 0),
        and each exploit as its member's tag ``exploit_<epoch>``: donor, scores and values."""
        exploits = {e.member: e for e in event.exploits}
        now, epoch = now_ms(), round(event.epochs)
        for e in event.exploits:
            if e.score is None and e.member in self._logged:  # diverged, and trains on
                self._post("reopen a member's run", "reopen_trial", e.member)
        for member, values in event.hparams.items():
            if member not in self._logged:
                continue
            points = [(epoch, values)]
            if event.rung == 0:
                points.append((0, exploits[member].before if member in exploits else values))
            metrics = [(f"hparam_{k}", float(v), now, step) for step, vs in points
                       for k, v in vs.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)]
            tags = {}
            if member in exploits:
                e = exploits[member]
                tags[f"exploit_{epoch}"] = (
                    f"copied {e.donor} ({_score(e.donor_score)} against its own "
                    f"{_score(e.score)}); " + " ".join(f"{k}={v}" for k, v in values.items()))
            self._post("log a population's values", "log_trial_rung", member, {}, tags,
                       metrics, now)

    def on_trial_ended(self, event: TrialEnded) -> None:
        self.end_trial(event.trial_id, STATUS[event.status])

    def on_search_finished(self, event: SearchFinished) -> None:
        """Logs how many ``trials`` the search sampled; under several objectives, tags each
        trial run of the Pareto front ``pareto_front=true``: filter the front in the UI with
        ``tags.pareto_front = 'true'``."""
        self.log_metrics({"trials": len(event.result.trial_records)})
        for point in event.result.front or ():
            if point.trial_id in self._logged:
                self._post("tag the Pareto front", "log_trial_rung", point.trial_id, {},
                           {"pareto_front": "true"}, [], now_ms())

    def on_summary(self, event: Summary) -> None:
        if event.metrics or event.tags:
            self.log_metrics(event.metrics, event.tags)
        for path, folder in event.artifacts:
            self.log_artifact(path, folder)

    @abstractmethod
    def log_rung_plan(self, bracket: int, rung: int, epochs: float,
                      packs: Sequence[Sequence[Any]], done: Sequence[str] = (),
                      name: str | None = None) -> None: ...

    @abstractmethod
    def log_trial_rung(self, trial_id: str, hparams: Mapping[str, Any],
                       tags: Mapping[str, Any], epochs: float,
                       metrics: Mapping[str, float | None]) -> None: ...

    @abstractmethod
    def log_pack(self, index: int, pack: PackRecord, best: float | None = None,
                 epochs_spent: float | None = None, metric: str = "val_accuracy") -> None: ...

    @abstractmethod
    def end_trial(self, trial_id: str, status: str) -> None: ...

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float | None],
                    tags: Mapping[str, str] | None = None) -> None: ...

    @abstractmethod
    def log_artifact(self, path: Any, artifact_path: str | None = None) -> None: ...

    @abstractmethod
    def _post(self, what: str, operation: str, *args: Any) -> None: ...


def _score(value: float | None) -> str:
    return "diverged" if value is None else f"{value:.4f}"


def now_ms() -> int:
    return int(time.time() * 1000)
