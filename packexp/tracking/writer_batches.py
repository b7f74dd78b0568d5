"""The MLflow writer's loop over the tracker's calls (``serve``): in order for each run, a
run's ``log_batch`` calls held up to ``HOLD_S`` and merged into one, a sqlite store's trial
run calls of that time in one transaction (``sqlite_store.TrialRuns``), and the packing plans
held with them written as one folder."""

from __future__ import annotations

import queue
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from packexp.tracking.sqlite_store import MAX_ROWS, TrialRuns

# Seconds a run's batch waits for more of the run's metrics, to be merged with them.
HOLD_S = 1.0

Metric = tuple[str, float, int, int]  # key, value, timestamp (ms), step


class Batch(NamedTuple):
    """What one queued call logs with ``log_batch`` to a run that exists."""

    run_id: str
    metrics: Sequence[Metric]
    tags: Mapping[str, str]


class BatchingServer:
    """The writer's serving loop and what it holds. The writer (``MlflowWriter``) keeps the
    runs below and makes the MLflow calls: one call (``_apply``), a merged batch
    (``_log_batch``), a failure told (``_failed``) and the end of the runs (``end``)."""

    _client: Any
    _parent: str | None
    _runs: dict[str, str]
    _open: set[str]
    _trials: TrialRuns | None
    _plans: dict[str, tuple[str, Mapping[str, Any]]]

    def serve(self, inbox: queue.SimpleQueue) -> None:
        """Applies the queued calls until the tracker closes the queue or dies: in order for
        each run, a run's batches held up to ``HOLD_S`` to be merged into one, and on a
        sqlite store every trial run's calls of that time in one transaction."""
        held: dict[str, list[tuple[str, Batch]]] = {}
        since = 0.0
        while True:
            waiting = bool(held or self._plans) or (self._trials is not None
                                                     and self._trials.pending > 0)
            if waiting and time.monotonic() >= since + HOLD_S:  # calls that never pause
                self._flush(held)
                continue
            try:
                message = inbox.get(timeout=max(0.0, since + HOLD_S - time.monotonic())
                                    if waiting else None)
            except queue.Empty:
                self._flush(held)
                continue
            if message is None:  # the tracker's process is gone
                self._flush(held)
                self.end("KILLED", None)
                return
            what, operation, args = message.what, message.operation, message.args
            if operation == "close":
                self._flush(held)
                return
            if operation == "log_rung_plan" and what is not None and self._parent is not None:
                since = since if waiting else time.monotonic()
                self._plans[args[1]] = (what, args[0])  # written together, as one folder
                continue
            if what is not None and self._held_by_trials(what, operation, args):
                since = since if waiting else time.monotonic()
                if self._trials.pending >= MAX_ROWS:
                    self._flush_trials()
                continue
            batch = self._as_batch(operation, args) if what is not None else None
            if batch is not None:
                since = since if waiting else time.monotonic()
                held.setdefault(batch.run_id, []).append((what, batch))
                continue
            self._flush(held, self._touches(operation, args))
            self._apply(what, operation, args)

    def _held_by_trials(self, what: str, operation: str, args: tuple) -> bool:
        """Whether the trial runs' batches (a sqlite store's) took the call: a new trial
        run, or a rung or the end of one they hold."""
        trials = self._trials
        if trials is None or operation not in ("log_trial_rung", "end_trial"):
            return False
        trial_id = args[0]
        run_id = self._runs.get(trial_id)
        if operation == "end_trial":
            if not trials.owns(run_id) or trial_id not in self._open:
                return False
            self._open.discard(trial_id)
            trials.end(what, run_id, *args[1:])
            return True
        _, params, tags, metrics, timestamp = args
        if run_id is None:
            self._runs[trial_id] = trials.create(what, trial_id, params, tags, metrics,
                                                 timestamp)
            self._open.add(trial_id)
        elif trials.owns(run_id):
            trials.log(what, run_id, metrics, tags)
        else:
            return False
        return True

    def _flush_trials(self) -> None:
        trials = self._trials
        if trials is None or not trials.pending:
            return
        whats, created = trials.whats, trials.created
        try:
            trials.flush()
        except Exception as e:  # reported; later calls take the store's path, one each, and
            self._trials = None  # a run the batch would have made is made by its next call
            for trial_id in created:
                self._runs.pop(trial_id, None)
                self._open.discard(trial_id)
            for what in whats:
                self._failed(what, e)

    def _flush_plans(self) -> None:
        """The held packing plans into the parent's artifacts with one copy of a folder (a
        call each costs as much as a trial run's batch)."""
        if not self._plans:
            return
        import json
        import tempfile

        plans, self._plans = self._plans, {}
        try:
            with tempfile.TemporaryDirectory(prefix="packexp-plans-") as folder:
                for name, (_, payload) in plans.items():
                    path = Path(folder, name)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    # As log_dict writes a .json file.
                    path.write_text(json.dumps(payload, indent=2, default=str))
                self._client.log_artifacts(self._parent, folder)
        except Exception as e:
            for what in dict.fromkeys(what for what, _ in plans.values()):
                self._failed(what, e)

    def _as_batch(self, operation: str, args: tuple) -> Batch | None:
        """The call as a batch for a run that exists, or None: it must be applied alone."""
        if operation == "log_metrics" and self._parent is not None:
            return Batch(self._parent, args[0], args[1] if len(args) > 1 else {})
        if operation == "log_trial_rung" and args[0] in self._runs:
            trial_id, _, tags, metrics, _ = args
            return Batch(self._runs[trial_id], metrics, tags)
        return None

    def _touches(self, operation: str, args: tuple) -> set[str] | None:
        """The runs whose held batches must be applied before this call; None: all of them.
        (A new trial run, a packing plan and an artifact need none.)"""
        if operation in ("log_trial_rung", "log_rung_plan", "log_artifact"):
            return set()
        if operation in ("end_trial", "reopen_trial"):
            return {self._runs.get(args[0])}
        return None

    def _flush(self, held: dict[str, list[tuple[str, Batch]]],
               runs: set[str] | None = None) -> None:
        if runs is None or runs - {self._parent}:  # a trial run's call: theirs first
            self._flush_trials()
        if runs is None:
            self._flush_plans()
        for run_id in [r for r in held if runs is None or r in runs]:
            batches = held.pop(run_id)
            tags: dict[str, str] = {}
            for _, batch in batches:
                tags.update(batch.tags)  # a later value of a tag replaces an earlier one
            try:
                self._log_batch(run_id, [m for _, b in batches for m in b.metrics], (), tags)
            except Exception as e:
                for what, _ in batches:
                    self._failed(what, e)
