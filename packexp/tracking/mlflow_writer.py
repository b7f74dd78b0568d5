"""The MLflow writer: the only code that calls MLflow, in a process of its own.

A tracker queues its calls to the writer, which applies them off the training thread and
beside it on another core, each run's in the order they were made; a run's ``log_batch``
calls that wait together are merged into one, and on a sqlite store every trial run's calls
of a second are one transaction (``sqlite_store.TrialRuns``; the loop that holds them is
``writer_batches``). The process (``writer_main``) ignores Ctrl-C and SIGTERM, which reach the
whole process group: the tracker ends the runs and the writer drains its queue. If the
tracker's process dies first, the writer ends the runs it left open as ``KILLED``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.tracking.datasets import source_tags, split_inputs
from packexp.tracking.messages import Error, Failed, Reply, Result
from packexp.tracking.mlflow_view import view_tags
from packexp.tracking.sqlite_store import TrialRuns, checkpoint, exclusive, set_journal_mode
from packexp.tracking.writer_batches import BatchingServer, Metric

log = logging.getLogger(__name__)

# What a trial run's MLflow status means, as its ``outcome`` tag says in words.
OUTCOMES = {"KILLED": "cut", "FAILED": "diverged", "FINISHED": "completed"}
INTERRUPTED = "interrupted"
# MLflow 3's UI opens an experiment by its kind; without this tag it may guess GenAI and land
# on traces instead of the training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# MLflow's limits on one log_batch call.
MAX_METRICS, MAX_PARAMS_TAGS, MAX_ENTITIES = 1000, 100, 1000
# The calls a tracker may queue.
OPERATIONS = frozenset({"start", "log_rung_plan", "log_trial_rung", "log_metrics", "end_trial",
                        "reopen_trial", "log_artifact", "log_model", "log_model_file", "end"})


class StoreError(Exception):
    """The store cannot be used, in words that name the setting (the tracker's TrackingError)."""


class MlflowWriter(BatchingServer):
    """The writer process's side: one ``MlflowClient`` and the runs of the tracker it serves."""

    def __init__(self, post: Callable[[Reply], None]) -> None:
        self._post = post
        self._source: dict[str, str] = {}
        self._reset()

    def _reset(self) -> None:
        self._client: Any = None
        self._database: Path | None = None
        self._parent: str | None = None
        self._experiment_id: str | None = None
        self._runs: dict[str, str] = {}
        self._open: set[str] = set()
        self._inputs: list[Any] = []
        self._trials: TrialRuns | None = None  # a sqlite store's trial runs, in batches
        self._plans: dict[str, tuple[str, Mapping[str, Any]]] = {}  # file: what, its plan

    def warm_up(self) -> None:
        """Imports what a tracker's start needs (the default sqlite store's too) and finds
        the source tags, before any tracker asks."""
        # MLflow's import makes half a million objects and no garbage: collections during it
        # cost a third of its CPU, and later ones need not look at them again.
        gc.disable()
        try:
            import mlflow.data.code_dataset_source
            import mlflow.store.tracking.sqlalchemy_store
            import mlflow.tracking  # noqa: F401
        finally:
            gc.freeze()
            gc.enable()
        self._source = source_tags()  # after: its git objects are garbage, to be collected

    def _apply(self, what: str | None, operation: str, args: tuple) -> None:
        try:
            if operation not in OPERATIONS:
                raise ValueError(f"no such call: {operation}")
            result = getattr(self, operation)(*args)
        except Exception as e:
            if what is None:
                self._post(Error(str(e) if isinstance(e, StoreError) else one_line(e)))
            else:
                self._failed(what, e)
        else:
            if what is None:
                self._post(Result(result))

    def _failed(self, what: str, error: BaseException) -> None:
        self._post(Failed(what, one_line(error)))

    def _log_batch(self, run_id: str, metrics: Iterable[Metric],
                   params: Iterable[tuple[str, str]], tags: Mapping[str, str]) -> None:
        """Everything in as few ``log_batch`` calls as MLflow's limits allow."""
        from mlflow.entities import Metric as MetricEntity
        from mlflow.entities import Param, RunTag

        metrics = [MetricEntity(k, v, t, s) for k, v, t, s in metrics]
        params = [Param(k, v) for k, v in params]
        tags = [RunTag(k, v) for k, v in tags.items()]
        while metrics or params or tags:
            p, params = params[:MAX_PARAMS_TAGS], params[MAX_PARAMS_TAGS:]
            t, tags = tags[:MAX_PARAMS_TAGS], tags[MAX_PARAMS_TAGS:]
            room = min(MAX_METRICS, MAX_ENTITIES - len(p) - len(t))
            m, metrics = metrics[:room], metrics[room:]
            self._client.log_batch(run_id, metrics=m, params=p, tags=t)

    def start(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Opens the parent run, or re-attaches to ``spec["resume_run_id"]`` and its trials.

        Returns:
            The parent run's id and the names of the trial runs it has.

        Raises:
            StoreError: Any failure, in words that name the setting; no run is left open.
        """
        from mlflow.tracking import MlflowClient

        self._reset()  # a writer kept for the next job starts afresh
        uri = spec["uri"]
        database = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
        try:
            if database is not None:
                database.parent.mkdir(parents=True, exist_ok=True)
            with _fail_fast(), exclusive(database):
                if database is not None and spec.get("journal_mode"):
                    set_journal_mode(database, spec["journal_mode"])
                self._database = database
                self._client = MlflowClient(tracking_uri=uri)
                self._source = self._source or source_tags()
                self._experiment_id = self._experiment(spec["experiment"], spec["artifacts"])
                if spec["splits"]:
                    self._inputs = split_inputs(spec["dataset"], spec["splits"],
                                                spec["dataset_source"])
                if spec["resume_run_id"] is not None:
                    self._reattach(uri, spec["resume_run_id"])
                else:
                    run = self._client.create_run(self._experiment_id,
                                                  run_name=spec["run_name"],
                                                  tags={**self._source, **spec["tags"]})
                    self._parent = run.info.run_id
                    self._log_batch(self._parent, (), spec["params"], {})
                    if self._inputs:
                        self._client.log_inputs(self._parent, datasets=self._inputs)
                self._trials = TrialRuns.of(self._client, uri, self._experiment_id,
                                            self._parent, self._source, self._inputs)
                if spec["config_yaml"] is not None:
                    # Also proves the artifact store works before any training.
                    self._client.log_text(self._parent, spec["config_yaml"], "config.yaml")
        except Exception as e:
            if self._parent is not None:  # never leave a run open behind a start-up error
                with contextlib.suppress(Exception):
                    self._client.set_terminated(self._parent, status="FAILED")
                self._parent = None
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"tracking.uri={uri}: cannot use the MLflow store "
                             f"({one_line(e)})") from e
        return {"run_id": self._parent, "trials": sorted(self._runs)}

    def _experiment(self, name: str, artifacts: str | None) -> str:
        """The experiment's id; created if missing, restored if deleted; its kind and the
        saved view of its runs table set."""
        from mlflow.exceptions import MlflowException

        client = self._client
        found = client.get_experiment_by_name(name)
        if found is None:
            try:
                return client.create_experiment(name, artifact_location=artifacts,
                                                tags={**EXPERIMENT_KIND, **view_tags({})})
            except MlflowException as e:
                found = client.get_experiment_by_name(name)
                if found is None:  # not a parallel job that created it first: a bad name
                    raise StoreError(f"tracking.experiment={name!r}: MLflow rejects it "
                                     f"({one_line(e)})") from None
        if found.lifecycle_stage == "deleted":
            try:
                client.restore_experiment(found.experiment_id)
            except MlflowException as e:
                raise StoreError(
                    f"tracking.experiment={name!r}: the MLflow experiment of that "
                    f"name is deleted and cannot be restored ({one_line(e)}); choose another "
                    "name or delete it for good (mlflow gc)") from None
            log.warning("tracking.experiment=%r was a deleted MLflow experiment; restored it",
                        name)
        for key, value in {**EXPERIMENT_KIND, **view_tags(found.tags)}.items():
            if found.tags.get(key) != value:  # a store made before packexp set them
                client.set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id

    def _reattach(self, uri: str, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_run(run_id)
        except MlflowException:
            raise StoreError(f"tracking.uri={uri}: the run being resumed logged to "
                             f"MLflow run {run_id}, which this store does not have") from None
        self._client.update_run(run_id, status="RUNNING")
        self._parent = run_id
        children = self._client.search_runs(
            [self._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
            max_results=50000)
        for child in children:
            name = child.info.run_name
            self._runs[name] = child.info.run_id
            if child.info.status == "RUNNING" or child.data.tags.get("outcome") == INTERRUPTED:
                self._client.update_run(child.info.run_id, status="RUNNING")
                self._open.add(name)
        log.info("re-attached to MLflow run %s and %d trial runs", run_id, len(children))

    def log_rung_plan(self, payload: Mapping[str, Any], name: str) -> None:
        self._client.log_dict(self._parent, payload, name)

    def log_trial_rung(self, trial_id: str, params: Mapping[str, str], tags: Mapping[str, str],
                       metrics: Sequence[Metric], timestamp: int) -> None:
        """Opens the trial's run (the first time it is logged, or once it could be), started
        at ``timestamp`` (ms), and logs its params and metrics; later rungs are batches."""
        run_id = self._runs.get(trial_id)
        if run_id is not None:
            self._log_batch(run_id, metrics, (), tags)
            return
        run = self._client.create_run(
            self._experiment_id, start_time=timestamp, run_name=trial_id,
            tags={"mlflow.parentRunId": self._parent, **self._source, **tags})
        run_id = self._runs[trial_id] = run.info.run_id
        self._open.add(trial_id)
        self._log_batch(run_id, metrics, params.items(), {})
        if self._inputs:
            self._client.log_inputs(run_id, datasets=self._inputs)

    def log_metrics(self, metrics: Sequence[Metric], tags: dict | None = None) -> None:
        self._log_batch(self._parent, metrics, (), tags or {})

    def end_trial(self, trial_id: str, status: str, outcome: str, timestamp: int) -> None:
        if trial_id in self._open:
            self._open.discard(trial_id)
            self._end_run(self._runs[trial_id], status, outcome, timestamp)

    def reopen_trial(self, trial_id: str) -> None:
        """Marks an ended trial's run RUNNING again: a population's diverged member that
        trains on from a donor's state."""
        if trial_id in self._runs and trial_id not in self._open:
            self._client.update_run(self._runs[trial_id], status="RUNNING")
            self._client.delete_tag(self._runs[trial_id], "outcome")
            self._open.add(trial_id)

    def _end_run(self, run_id: str, status: str, outcome: str, timestamp: int | None) -> None:
        self._client.set_tag(run_id, "outcome", outcome)
        self._client.set_terminated(run_id, status=status, end_time=timestamp)

    def log_artifact(self, path: str, artifact_path: str | None, folder: bool) -> None:
        log_it = self._client.log_artifacts if folder else self._client.log_artifact
        log_it(self._parent, path, artifact_path)

    def log_model(self, model: Any, register_as: str | None) -> dict[str, str]:
        """A kept model (``tracking.models.KerasFile``) on the parent run (``mlflow_model``)."""
        from packexp.tracking.mlflow_model import log_keras_file

        return log_keras_file(self._client, self._parent, model, register_as,
                              self._experiment_id)

    def log_model_file(self, uri: str, run_id: str, model: Any,
                       register_as: str | None) -> dict[str, str]:
        """A kept model into any run of the store at ``uri``, with no tracker's runs open."""
        from mlflow.tracking import MlflowClient

        from packexp.tracking.mlflow_model import log_keras_file

        return log_keras_file(MlflowClient(tracking_uri=uri), run_id, model, register_as)

    def end(self, status: str, timestamp: int | None) -> None:
        """Ends any trial run still open (``outcome`` = interrupted) and the parent run, at
        ``timestamp`` (ms; None: now)."""
        if self._parent is None:
            return
        for trial_id in sorted(self._open):
            self._open.discard(trial_id)
            # An open trial was cut short by the end of the search, not by halving.
            run_id, ended = self._runs[trial_id], "KILLED" if status == "FINISHED" else status
            if self._trials is not None and self._trials.owns(run_id):
                self._trials.end("end a trial run", run_id, ended, INTERRUPTED, timestamp)
                continue
            try:
                self._end_run(run_id, ended, INTERRUPTED, timestamp)
            except Exception as e:
                self._failed("end a trial run", e)
        self._flush_trials()
        try:
            self._client.set_terminated(self._parent, status=status, end_time=timestamp)
        except Exception as e:
            self._failed("end the run", e)
        self._parent = None
        if self._database is not None:
            checkpoint(self._database)


@contextlib.contextmanager
def _fail_fast() -> Iterator[None]:
    """No retries and a short timeout while the store is checked, whatever the user set."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                                           "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "10"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def one_line(error: BaseException) -> str:
    """The error in one line of at most 300 characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."

