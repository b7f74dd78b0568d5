"""A sqlite store for the MLflow writer (``mlflow_writer``): its file (a lock beside it, its
journal mode, its checkpoint) and its trial runs written many at once (``TrialRuns``)."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

Metric = tuple[str, float, int, int]  # key, value, timestamp (ms), step
# Rows a batch holds at most before it is written, whatever the hold's time left: one
# transaction's lock on the store stays brief.
MAX_ROWS = 20_000


class TrialRuns:
    """The trial runs one writer created in this session, while they are open, written many at
    once: what a hold gathers (new runs with their params, tags, metrics and dataset inputs,
    later rungs, ends) in one transaction, through MLflow's own table models, as the store's
    ``create_run``, ``log_batch``, ``log_inputs``, ``set_tag`` and ``set_terminated`` would have
    written them with a call and a transaction each.

    Only this writer writes them, so their latest metrics and tag keys are kept here, not read
    back: a batch only inserts and updates. A run leaves once its end is written (a later call
    to it, the Pareto front's tag or a population's member trained on, takes the store's own
    path, one call each, as a run re-attached on resume does).

    Args:
        store: The client's ``SqlAlchemyStore``.
        experiment: The experiment (its id and artifact location).
        parent: The parent run's id, each trial run's ``mlflow.parentRunId``.
        source: The source tags every trial run carries.
        datasets: Each dataset input's id in the store and its input tags, which every trial
            run gets (``datasets.split_inputs``, logged on the parent first).
    """

    def __init__(self, store: Any, experiment: Any, parent: str, source: Mapping[str, str],
                 datasets: Sequence[tuple[str, Sequence[Any]]]) -> None:
        self._store = store
        self._experiment_id = experiment.experiment_id
        self._artifacts = experiment.artifact_location
        self._parent = parent
        self._source = dict(source)
        self._datasets = datasets
        # Each open run's latest value of each metric (step, timestamp, value, is_nan), those
        # of its metrics and tags the store holds already, by key.
        self._latest: dict[str, dict[str, tuple[int, int, float, bool]]] = {}
        self._stored_latest: dict[str, set[str]] = {}
        self._stored_tags: dict[str, set[str]] = {}
        self._reset()

    def _reset(self) -> None:
        self._rows: dict[str, list[dict[str, Any]]] = {}  # table: rows to insert
        self._tags: dict[tuple[str, str], str] = {}  # (run, key): its value, the last given
        self._latest_changed: set[tuple[str, str]] = set()
        self._ends: dict[str, tuple[str, int]] = {}  # run: status, end time
        self._metrics: set[tuple] = set()  # the batch's metric rows, once each
        self._whats: dict[str, None] = {}
        self.created: list[str] = []  # the trials whose runs the batch makes
        self.pending = 0  # rows (and updates) waiting for the next flush

    @classmethod
    def of(cls, client: Any, uri: str, experiment_id: str, parent: str,
           source: Mapping[str, str], inputs: Sequence[Any]) -> TrialRuns | None:
        """Batches for a sqlite store's client, else None: other stores take a call each (a
        server writes its own; a PostgreSQL or MySQL store is left to MLflow's code)."""
        from mlflow.store.tracking.dbmodels.models import SqlDataset
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = getattr(getattr(client, "_tracking_client", None), "store", None)
        if not uri.startswith("sqlite:") or not isinstance(store, SqlAlchemyStore):
            return None
        datasets = []
        with store.ManagedSessionMaker() as session:
            for dataset_input in inputs:  # logged on the parent: each is in the store once
                found = session.query(SqlDataset.dataset_uuid).filter(
                    SqlDataset.experiment_id == experiment_id,
                    SqlDataset.name == dataset_input.dataset.name,
                    SqlDataset.digest == dataset_input.dataset.digest).first()
                if found is None:
                    return None
                datasets.append((found[0], list(dataset_input.tags)))
        return cls(store, client.get_experiment(experiment_id), parent, source, datasets)

    def owns(self, run_id: str | None) -> bool:
        return run_id in self._latest

    def create(self, what: str, trial_id: str, params: Mapping[str, str],
               tags: Mapping[str, str], metrics: Sequence[Metric], timestamp: int) -> str:
        """A new trial run, started at ``timestamp`` (ms), with its first rung; its id."""
        from mlflow.utils.uri import append_to_uri_path

        run_id = uuid.uuid4().hex
        self._whats[what] = None
        self.created.append(trial_id)
        tags = {"mlflow.parentRunId": self._parent, **self._source, **tags,
                "mlflow.runName": trial_id}
        self._add("runs", run_uuid=run_id, name=trial_id, source_type="UNKNOWN", source_name="",
                  entry_point_name="", user_id=tags.get("mlflow.user", "unknown"),
                  status="RUNNING", start_time=timestamp, end_time=None, deleted_time=None,
                  source_version="", lifecycle_stage="active",
                  artifact_uri=append_to_uri_path(self._artifacts, run_id, "artifacts"),
                  experiment_id=self._experiment_id)
        self._latest[run_id] = {}
        self._stored_latest[run_id], self._stored_tags[run_id] = set(), set()
        for key, value in params.items():
            self._add("params", run_uuid=run_id, key=key, value=value)
        for dataset_id, input_tags in self._datasets:
            input_id = uuid.uuid4().hex
            self._add("inputs", input_uuid=input_id, source_type="DATASET",
                      source_id=dataset_id, destination_type="RUN", destination_id=run_id,
                      step=0)
            for tag in input_tags:
                self._add("input_tags", input_uuid=input_id, name=tag.key, value=tag.value)
        self._log(run_id, metrics, tags)
        return run_id

    def log(self, what: str, run_id: str, metrics: Sequence[Metric],
            tags: Mapping[str, str]) -> None:
        """A later rung's metrics and tags, to a run this holds."""
        self._whats[what] = None
        self._log(run_id, metrics, tags)

    def end(self, what: str, run_id: str, status: str, outcome: str,
            timestamp: int | None) -> None:
        """Ends a run this holds: its ``outcome`` tag, status and end time (ms; None: now)."""
        from mlflow.utils.time import get_current_time_millis

        self._whats[what] = None
        self._log(run_id, (), {"outcome": outcome})
        self._ends[run_id] = (status, timestamp or get_current_time_millis())
        self.pending += 1

    def _log(self, run_id: str, metrics: Sequence[Metric], tags: Mapping[str, str]) -> None:
        latest = self._latest[run_id]
        for key, value, timestamp, step in metrics:
            is_nan, value = self._store.sanitize_metric_value(float(value))
            row = (run_id, key, value, timestamp, step, is_nan)
            if row in self._metrics:  # as log_batch does, the same metric twice is one row
                continue
            self._metrics.add(row)
            self._add("metrics", run_uuid=run_id, key=key, value=value, timestamp=timestamp,
                      step=step, is_nan=is_nan)
            # MLflow's rule: the latest is the greatest (step, timestamp, value).
            if key not in latest or (step, timestamp, value) > latest[key][:3]:
                latest[key] = (step, timestamp, value, is_nan)
                self._latest_changed.add((run_id, key))
        for key, value in tags.items():
            self._tags[(run_id, key)] = value
            self.pending += 1

    def _add(self, table: str, **row: Any) -> None:
        self._rows.setdefault(table, []).append(row)
        self.pending += 1

    @property
    def whats(self) -> list[str]:
        """What the held calls are to do, in words, each once: what a failed flush failed."""
        return list(self._whats)

    def flush(self) -> None:
        """Writes what is held in one transaction, and forgets the runs it ends.

        Raises:
            Exception: The store's error; what was held is dropped all the same.
        """
        if not self.pending:
            return
        try:
            self._write()
        finally:
            for run_id in self._ends:
                for kept in (self._latest, self._stored_latest, self._stored_tags):
                    kept.pop(run_id, None)
            self._reset()

    def _write(self) -> None:
        from mlflow.store.tracking.dbmodels.models import (
            SqlInput,
            SqlInputTag,
            SqlLatestMetric,
            SqlMetric,
            SqlParam,
            SqlRun,
            SqlTag,
        )
        from sqlalchemy import bindparam

        new_tags, changed_tags = [], []
        for (run_id, key), value in self._tags.items():
            row = {"run_uuid": run_id, "key": key, "value": value}
            (changed_tags if key in self._stored_tags[run_id] else new_tags).append(row)
        new_latest, changed_latest = [], []
        for run_id, key in self._latest_changed:
            step, timestamp, value, is_nan = self._latest[run_id][key]
            row = {"run_uuid": run_id, "key": key, "value": value, "timestamp": timestamp,
                   "step": step, "is_nan": is_nan}
            (changed_latest if key in self._stored_latest[run_id] else new_latest).append(row)
        ends = [{"id": run_id, "status": status, "end": end}
                for run_id, (status, end) in self._ends.items()]
        inserts = [(SqlRun, self._rows.get("runs")), (SqlParam, self._rows.get("params")),
                   (SqlInput, self._rows.get("inputs")),
                   (SqlInputTag, self._rows.get("input_tags")),
                   (SqlMetric, self._rows.get("metrics")), (SqlTag, new_tags),
                   (SqlLatestMetric, new_latest)]
        with self._store.ManagedSessionMaker(read_only=False) as session:
            connection = session.connection()  # the session's transaction, its commit
            for model, rows in inserts:
                if rows:  # one executemany a table
                    connection.execute(model.__table__.insert(), rows)
            for model, rows, values in ((SqlTag, changed_tags, ("value",)),
                                        (SqlLatestMetric, changed_latest,
                                         ("value", "timestamp", "step", "is_nan"))):
                if rows:
                    table = model.__table__
                    connection.execute(
                        table.update()
                        .where(table.c.run_uuid == bindparam("b_run"),
                               table.c.key == bindparam("b_key"))
                        .values({v: bindparam(f"b_{v}") for v in values}),
                        [{"b_run": r["run_uuid"], "b_key": r["key"],
                          **{f"b_{v}": r[v] for v in values}} for r in rows])
            if ends:
                table = SqlRun.__table__
                connection.execute(
                    table.update().where(table.c.run_uuid == bindparam("id"))
                    .values(status=bindparam("status"), end_time=bindparam("end")), ends)
        for run_id, key in self._tags:
            self._stored_tags[run_id].add(key)
        for run_id, key in self._latest_changed:
            self._stored_latest[run_id].add(key)


@contextlib.contextmanager
def exclusive(database: Path | None) -> Iterator[None]:
    """Holds a lock beside a sqlite store, so parallel jobs do not create its tables twice."""
    if database is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as before
        yield
        return
    with open(database.with_name(database.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def set_journal_mode(database: Path, mode: str) -> None:
    """Sets a sqlite store's journal mode, which the file keeps; a store that refuses it (one
    read-only) is left as it is, for MLflow to judge."""
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(database)) as db:
        if db.execute("PRAGMA journal_mode").fetchone()[0] != mode:
            db.execute(f"PRAGMA journal_mode={mode}")


def checkpoint(database: Path) -> None:
    """Copies a WAL store's log into the database file without waiting for other writers, so
    the file alone holds every run that has ended (none for another journal mode)."""
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(database)) as db:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
