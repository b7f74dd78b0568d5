"""The MLflow tracker: the only module that talks to MLflow."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packexp.events import MemberScored, PackFinished, RungPlanned, Summary, TrialEnded
from packexp.tracking.base import STATUS, Tracker, TrackingError

if TYPE_CHECKING:
    from packexp.data import Dataset

log = logging.getLogger(__name__)

# What a trial run's MLflow status means, as its ``outcome`` tag says in words.
OUTCOMES = {"KILLED": "cut", "FAILED": "diverged", "FINISHED": "completed"}
INTERRUPTED = "interrupted"
MAX_EXPERIMENT_NAME = 500  # MLflow's limit
# MLflow 3's UI opens an experiment by its kind; without this tag it may guess GenAI and land
# on traces instead of the training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# What the Source column shows for every run packexp makes, whatever started the process.
SOURCE = {"mlflow.source.name": "python -m packexp", "mlflow.source.type": "LOCAL"}


class MlflowTracker(Tracker):
    """One parent run per invocation and one nested run per trial.

    Uses ``MlflowClient`` with explicit run ids, never the fluent active-run stack, so a
    failed job in a multirun cannot leave a run open for the next one. The store is checked
    at start-up (a ``TrackingError`` there); after that a logging call that fails is a
    warning, never the end of a search that has been training for an hour.

    Args:
        uri: Tracking URI; None for the local store ``<store_dir>/mlflow.db``.
        experiment: MLflow experiment name that groups the runs (a sweep's jobs share it).
        store_dir: Folder of the default local store and its artifacts.
        sample_interval_s: Seconds between host RSS (and GPU memory and utilisation)
            readings logged on the parent run; null or 0 for none.
    """

    def __init__(self, uri: str | None = None, experiment: Any = "packexp",
                 store_dir: str = "outputs", sample_interval_s: float | None = 1.0) -> None:
        self.experiment = experiment_name(experiment)
        if sample_interval_s is not None and (
                isinstance(sample_interval_s, bool)
                or not isinstance(sample_interval_s, int | float) or sample_interval_s < 0):
            raise ValueError(f"sample_interval_s={sample_interval_s!r}: must be a number of "
                             "seconds >= 0, or null")
        if uri is not None and (not isinstance(uri, str) or not uri.strip()):
            raise ValueError(f"uri={uri!r}: must be a tracking URI, or null for the local store")
        self.store = Path(store_dir).resolve()
        self.uri = uri or f"sqlite:///{self.store / 'mlflow.db'}"
        self.sample_interval_s = sample_interval_s or 0
        self._client: Any = None
        self._parent: str | None = None
        self._experiment_id: str | None = None
        self._trial_runs: dict[str, str] = {}
        self._open: set[str] = set()
        self._pending: dict[str, str] = {}
        self._sampler: Any = None
        self._inputs: list[Any] = []
        self._samples_logged = 0
        self._warned = 0

    @property
    def location(self) -> str:
        return self.uri

    @property
    def run_id(self) -> str | None:
        return self._parent

    # The search's events, each kept as the store keeps it.

    def on_rung_planned(self, event: RungPlanned) -> None:
        self.log_rung_plan(event.bracket, event.rung, event.epochs, event.packs, event.done)

    def on_member_scored(self, event: MemberScored) -> None:
        result, pack = event.result, event.pack
        self.log_trial_rung(
            result.trial_id, event.trial.hparams,
            {**event.tags, "bracket": result.bracket, "rung": result.rung,
             "pack_id": result.pack_id, "fused": str(pack.fused).lower(),
             "xla": str(pack.xla).lower(), "grouped_conv": pack.grouped_conv,
             "promoted_from": event.promoted_from},
            result.epochs,
            {"val_accuracy": result.val_accuracy, "val_loss": result.val_loss,
             "train_loss": result.train_loss, "steps": result.steps,
             "step_time_ms": pack.step_time_ms, "peak_memory_mb": pack.peak_memory_mb,
             "members": len(pack.members), "switch_overhead_s": pack.switch_overhead_s})

    def on_pack_finished(self, event: PackFinished) -> None:
        self.log_pack(event.index, event.pack.to_dict(), event.best)

    def on_trial_ended(self, event: TrialEnded) -> None:
        self.end_trial(event.trial_id, STATUS[event.status])

    def on_summary(self, event: Summary) -> None:
        if event.metrics:
            self.log_metrics(event.metrics)
        for path, folder in event.artifacts:
            self.log_artifact(path, folder)

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        """Opens the parent run, or re-attaches to ``resume_run_id`` and its trial runs.

        Every failure here is a ``TrackingError`` naming the setting, raised before training.
        The source tags (``SOURCE``) join ``tags``; logging ``config.yaml`` also proves the
        artifact store. The dataset becomes the run inputs of the parent and of every trial
        run: its training and validation arrays, each with name, digest and shapes, whose
        source is the code when there is no ``dataset_source``.
        """
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        database = Path(self.uri.removeprefix("sqlite:///")) if self.uri.startswith(
            "sqlite:///") else None
        if database is not None:
            database.parent.mkdir(parents=True, exist_ok=True)
        try:
            with _fail_fast(), _exclusive(database):
                self._client = MlflowClient(tracking_uri=self.uri)
                self._experiment_id = self._experiment()
                self._inputs = dataset_inputs(dataset, dataset_source) if dataset else []
                if resume_run_id is not None:
                    self._reattach(resume_run_id)
                else:
                    run = self._client.create_run(self._experiment_id, run_name=run_name,
                                                  tags={**source_tags(), **tags})
                    self._parent = run.info.run_id
                    items = [Param(k, str(v)[:6000]) for k, v in params.items()]
                    for i in range(0, len(items), 100):  # MLflow takes 100 params per batch
                        self._client.log_batch(self._parent, params=items[i : i + 100])
                    if self._inputs:
                        self._client.log_inputs(self._parent, datasets=self._inputs)
                if config_yaml is not None:
                    # Also proves the artifact store works before any training.
                    self._client.log_text(self._parent, config_yaml, "config.yaml")
        except Exception as e:
            if self._parent is not None:  # never leave a run open behind a start-up error
                with contextlib.suppress(Exception):
                    self._client.set_terminated(self._parent, status="FAILED")
                self._parent = None
            if isinstance(e, TrackingError):
                raise
            raise TrackingError(f"tracking.uri={self.uri}: cannot use the MLflow store "
                                f"({_one_line(e)})") from e
        if self.sample_interval_s:
            from packexp.telemetry import ResourceSampler

            self._sampler = ResourceSampler(self.sample_interval_s).start()

    def _experiment(self) -> str:
        """The experiment's id; created if missing, restored if deleted; kind set."""
        from mlflow.exceptions import MlflowException

        client = self._client
        found = client.get_experiment_by_name(self.experiment)
        if found is None:
            artifacts = (self.store / "mlartifacts").as_uri() if self._local else None
            try:
                return client.create_experiment(self.experiment, artifact_location=artifacts,
                                                tags=EXPERIMENT_KIND)
            except MlflowException as e:
                found = client.get_experiment_by_name(self.experiment)
                if found is None:  # not a parallel job that created it first: a bad name
                    raise TrackingError(f"tracking.experiment={self.experiment!r}: MLflow "
                                        f"rejects it ({_one_line(e)})") from None
        if found.lifecycle_stage == "deleted":
            try:
                client.restore_experiment(found.experiment_id)
            except MlflowException as e:
                raise TrackingError(
                    f"tracking.experiment={self.experiment!r}: the MLflow experiment of that "
                    f"name is deleted and cannot be restored ({_one_line(e)}); choose another "
                    "name or delete it for good (mlflow gc)") from None
            log.warning("tracking.experiment=%r was a deleted MLflow experiment; restored it",
                        self.experiment)
        for key, value in EXPERIMENT_KIND.items():
            if found.tags.get(key) != value:  # a store made before packexp set the kind
                client.set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id

    def _reattach(self, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_run(run_id)
        except MlflowException:
            raise TrackingError(f"tracking.uri={self.uri}: the run being resumed logged to "
                                f"MLflow run {run_id}, which this store does not have") from None
        self._client.update_run(run_id, status="RUNNING")
        self._parent = run_id
        children = self._client.search_runs(
            [self._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
            max_results=50000)
        for child in children:
            name = child.info.run_name
            self._trial_runs[name] = child.info.run_id
            if child.info.status == "RUNNING" or child.data.tags.get("outcome") == INTERRUPTED:
                self._client.update_run(child.info.run_id, status="RUNNING")
                self._open.add(name)
        log.info("re-attached to MLflow run %s and %d trial runs", run_id, len(children))

    @property
    def _local(self) -> bool:
        return self.uri.startswith(("sqlite:", "file:")) or "://" not in self.uri

    def log_rung_plan(self, bracket: int, rung: int, epochs: float, packs: Sequence[Sequence[Any]],
                      done: Sequence[str] = ()) -> None:
        """The strategy's packs for one rung, as ``packing/b<s>-r<rung>.json`` on the parent."""
        payload = {
            "bracket": bracket, "rung": rung, "epochs": epochs,
            "packs": [{"pack_id": f"b{bracket}-r{rung}-p{j:02d}",
                       "members": [t.trial_id for t in group],
                       "hparams": [dict(t.hparams) for t in group]}
                      for j, group in enumerate(packs)],
            "done_before_resume": list(done),
        }
        name = f"packing/b{bracket}-r{rung}{'-resumed' if done else ''}.json"
        self._safely("log the packing plan", self._client.log_dict, self._parent, payload, name)

    def log_trial_rung(
        self, trial_id: str, hparams: Mapping[str, Any], tags: Mapping[str, Any],
        epochs: float, metrics: Mapping[str, float | None],
    ) -> None:
        """The trial's scores after a rung (``step`` = its epochs); opens its run the first time."""
        self._safely("log a trial's rung", self._log_trial_rung, trial_id, hparams, tags,
                     epochs, metrics)
        if trial_id in self._pending:
            self.end_trial(trial_id, self._pending.pop(trial_id))

    def _log_trial_rung(self, trial_id: str, hparams: Mapping[str, Any],
                        tags: Mapping[str, Any], epochs: float,
                        metrics: Mapping[str, float | None]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client = self._client
        run_id = self._trial_runs.get(trial_id)
        if run_id is None:
            run = client.create_run(
                self._experiment_id, run_name=trial_id,
                tags={"mlflow.parentRunId": self._parent, **source_tags(), **_strings(tags)})
            run_id = self._trial_runs[trial_id] = run.info.run_id
            self._open.add(trial_id)
            client.log_batch(run_id, params=[Param(k, str(v)) for k, v in hparams.items()])
            if self._inputs:
                client.log_inputs(run_id, datasets=self._inputs)
        now = _now_ms()
        client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, round(epochs))
                     for k, v in metrics.items() if v is not None],
            tags=[RunTag(k, v) for k, v in _strings(tags).items()],
        )

    def log_pack(self, index: int, pack: Mapping[str, Any],
                 best_val_accuracy: float | None = None) -> None:
        """One finished pack's measurements on the parent run, ``step`` = ``index``.

        Also logs the best validation accuracy so far and the resource readings taken since
        the last call, so the UI plots them against wall time while the search runs.
        """
        from mlflow.entities import Metric

        now = _now_ms()
        values = {k: pack.get(k) for k in (
            "step_time_ms", "peak_memory_mb", "switch_overhead_s", "build_s", "trace_s",
            "train_s", "eval_s", "checkpoint_s", "probe_s", "duration_s", "predicted_s")}
        values["members"] = len(pack.get("members", ()))
        values["fused"] = float(bool(pack.get("fused")))
        values["reused"] = float(bool(pack.get("reused")))
        values["reused_members"] = pack.get("reused_members")
        values["best_so_far_val_accuracy"] = best_val_accuracy
        metrics = [Metric(k, float(v), now, index) for k, v in values.items() if v is not None]
        self._safely("log a pack", self._client.log_batch, self._parent, metrics=metrics)
        self._flush_samples()

    def end_trial(self, trial_id: str, status: str) -> None:
        """Ends the trial's run: KILLED (cut by successive halving), FAILED or FINISHED."""
        if trial_id not in self._trial_runs:
            self._pending[trial_id] = status  # retired before its first rung was logged
            return
        if trial_id in self._open:
            self._open.discard(trial_id)
            self._safely("end a trial run", self._end_run, self._trial_runs[trial_id], status,
                         OUTCOMES.get(status, status.lower()))

    def _end_run(self, run_id: str, status: str, outcome: str) -> None:
        self._client.set_tag(run_id, "outcome", outcome)
        self._client.set_terminated(run_id, status=status)

    def log_metrics(self, metrics: Mapping[str, float | None]) -> None:
        from mlflow.entities import Metric

        now = _now_ms()
        self._safely("log metrics", self._client.log_batch, self._parent, metrics=[
            Metric(k, float(v), now, 0) for k, v in metrics.items() if v is not None])

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A file or a folder's files, on the parent run; a missing path is skipped."""
        path = Path(path)
        if not path.exists():
            return
        log_it = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
        self._safely(f"log {path.name}", log_it, self._parent, str(path), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        """Ends the parent run and any trial run still open (``outcome`` = interrupted)."""
        if self._parent is None:
            return
        if self._sampler is not None:
            self._sampler.stop()
            self._flush_samples()
            self._sampler = None
        for trial_id in sorted(self._open):
            self._open.discard(trial_id)
            # An open trial was cut short by the end of the search, not by halving.
            self._safely("end a trial run", self._end_run, self._trial_runs[trial_id],
                         "KILLED" if status == "FINISHED" else status, INTERRUPTED)
        self._safely("end the run", self._client.set_terminated, self._parent, status=status)
        if self._warned:
            log.warning("%d MLflow calls failed in this run; its MLflow record is incomplete",
                        self._warned)
        self._parent = None

    def _flush_samples(self) -> None:
        if self._sampler is None:
            return
        from mlflow.entities import Metric

        metrics = []
        for sample in self._sampler.drain():
            metrics += [Metric(k, float(v), sample.timestamp_ms, self._samples_logged)
                        for k, v in sample.metrics().items()]
            self._samples_logged += 1
        for i in range(0, len(metrics), 1000):  # MLflow takes 1000 metrics per batch
            self._safely("log resource samples", self._client.log_batch, self._parent,
                         metrics=metrics[i : i + 1000])

    def _safely(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            call(*args, **kwargs)
        except Exception as e:
            self._warned += 1
            log.warning("MLflow: could not %s (%s); the search goes on", what, _one_line(e))


def experiment_name(value: Any) -> str:
    """``tracking.experiment`` as MLflow takes it, or a ``ValueError`` naming the key."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"experiment={value!r}: must be a name (a non-empty string)")
    name = str(value)
    if not name.strip():
        raise ValueError(f"experiment={value!r}: must be a name (a non-empty string)")
    if len(name) > MAX_EXPERIMENT_NAME:
        raise ValueError(f"experiment={name[:40]!r}...: MLflow takes at most "
                         f"{MAX_EXPERIMENT_NAME} characters, not {len(name)}")
    return name


def source_tags() -> dict[str, str]:
    """The runs' source: ``SOURCE``, with the user and git commit MLflow finds, if any."""
    from mlflow.tracking.context import registry

    try:
        found = registry.resolve_tags()
    except Exception:  # a context provider that fails must not stop the run
        found = {}
    return {**found, **SOURCE}


def dataset_inputs(dataset: Dataset, source: str | None = None) -> list[Any]:
    """The dataset as MLflow run inputs: its training and its validation arrays.

    Each has the dataset's name, a digest of its whole content (MLflow's own hashes a sample
    of rows) and a profile with the shapes; the context tag says which split it is.

    Args:
        dataset: The arrays the search trains and validates on.
        source: The file or folder they were read from; None for data made in code.
    """
    import mlflow.data
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.entities import DatasetInput, InputTag

    where = source if source is not None else CodeDatasetSource(tags=source_tags())
    inputs = []
    for context, x, y in (("training", dataset.x_train, dataset.y_train),
                          ("validation", dataset.x_val, dataset.y_val)):
        digest = hashlib.sha256()
        for array in (x, y):
            digest.update(str((array.dtype, array.shape)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        with warnings.catch_warnings():
            # MLflow registers its local artifact source twice ("" and "file" schemes) and
            # warns that a path matches both; either is the same class.
            warnings.filterwarnings("ignore", "The specified dataset source can be interpreted")
            numpy_dataset = mlflow.data.from_numpy(x, targets=y, name=dataset.name,
                                                   digest=digest.hexdigest()[:8], source=where)
        inputs.append(DatasetInput(numpy_dataset._to_mlflow_entity(),
                                   tags=[InputTag("mlflow.data.context", context)]))
    return inputs


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


@contextlib.contextmanager
def _exclusive(database: Path | None) -> Iterator[None]:
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


def _strings(tags: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in tags.items() if v is not None}


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _now_ms() -> int:
    return int(time.time() * 1000)
