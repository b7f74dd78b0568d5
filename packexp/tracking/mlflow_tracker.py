"""The MLflow tracker: what a search records in MLflow, queued to a writer process."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packexp.records.record import PackRecord
from packexp.tracking import writer_process
from packexp.tracking.base import TrackingError
from packexp.tracking.datasets import SOURCE, dataset_splits, source_tags, split_inputs
from packexp.tracking.mlflow_events import MlflowEvents, now_ms
from packexp.tracking.mlflow_writer import EXPERIMENT_KIND, INTERRUPTED, OUTCOMES, one_line
from packexp.tracking.models import registered_name
from packexp.tracking.writer_process import CallFailed, WriterGone

if TYPE_CHECKING:
    from packexp.data import Dataset
    from packexp.tracking.models import KerasFile

__all__ = ["EXPERIMENT_KIND", "INTERRUPTED", "OUTCOMES", "SOURCE", "MlflowTracker",
           "dataset_inputs", "experiment_name", "source_tags"]

log = logging.getLogger(__name__)

MAX_EXPERIMENT_NAME = 500  # MLflow's limit
JOURNAL_MODES = frozenset({"delete", "truncate", "persist", "memory", "wal", "off"})  # SQLite's
# Command-line flags under which Hydra runs no job.
NO_JOB = frozenset({"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info",
                    "-sc", "--shell-completion"})


class MlflowTracker(MlflowEvents):
    """One parent run per invocation and one nested run per trial (the search's events as
    those runs keep them: ``mlflow_events.MlflowEvents``).

    Every MLflow call is made by a writer process (``mlflow_writer``) that owns the
    ``MlflowClient``, with explicit run ids, never the fluent active-run stack. ``start``
    waits for it: the store is checked there (a ``TrackingError``). After that each call is
    queued and returns at once; a call the writer cannot apply is a warning, never the end
    of a search that has been training for an hour. ``end`` returns once all are applied.

    Args:
        uri: Tracking URI; None for the local store ``<store_dir>/mlflow.db``.
        experiment: MLflow experiment name that groups the runs (a sweep's jobs share it).
        store_dir: Folder of the default local store and its artifacts.
        sample_interval_s: Seconds between host RSS (and GPU memory and utilisation)
            readings logged on the parent run; null or 0 for none.
        journal_mode: The journal mode a sqlite store is set to (SQLite's ``PRAGMA
            journal_mode``); None leaves the store's own.
        register_as: A registered model's name: the search's logged model becomes its next
            version in the Model Registry; None registers nothing.
    """

    def __init__(self, uri: str | None = None, experiment: Any = "packexp",
                 store_dir: str = "outputs", sample_interval_s: float | None = 1.0,
                 journal_mode: str | None = "wal", register_as: str | None = None) -> None:
        self.experiment = experiment_name(experiment)
        self.register_as = registered_name(register_as)
        if sample_interval_s is not None and (
                isinstance(sample_interval_s, bool)
                or not isinstance(sample_interval_s, int | float) or sample_interval_s < 0):
            raise ValueError(f"sample_interval_s={sample_interval_s!r}: must be a number of "
                             "seconds >= 0, or null")
        if uri is not None and (not isinstance(uri, str) or not uri.strip()):
            raise ValueError(f"uri={uri!r}: must be a tracking URI, or null for the local store")
        if journal_mode is not None and str(journal_mode).lower() not in JOURNAL_MODES:
            raise ValueError(f"journal_mode={journal_mode!r}: must be one of "
                             f"{', '.join(sorted(JOURNAL_MODES))}, or null")
        self.journal_mode = None if journal_mode is None else str(journal_mode).lower()
        self.store = Path(store_dir).resolve()
        self.uri = uri or f"sqlite:///{self.store / 'mlflow.db'}"
        self.sample_interval_s = sample_interval_s or 0
        self._writer: writer_process.WriterProcess | None = None
        self._parent: str | None = None
        self._logged: set[str] = set()
        self._pending: dict[str, str] = {}
        self._sampler: Any = None
        self._samples_logged = 0
        self._warned = 0
        self._lost: str | None = None
        self._spec: dict[str, Any] = {}
        self._headline_first = False

    @property
    def location(self) -> str:
        return self.uri

    @property
    def run_id(self) -> str | None:
        return self._parent

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        """Opens the parent run, or re-attaches to ``resume_run_id`` and its trial runs.

        Every failure here is a ``TrackingError`` naming the setting, raised before training,
        and leaves no run open. The source tags (``SOURCE``) join ``tags``; logging
        ``config.yaml`` also proves the artifact store. The dataset becomes the run inputs of
        the parent and of every trial run: its training and validation arrays, each with
        name, digest and shapes, whose source is the code when there is no ``dataset_source``.
        """
        spec = {
            "uri": self.uri, "experiment": self.experiment,
            "artifacts": (self.store / "mlartifacts").as_uri() if self._local else None,
            "run_name": run_name, "tags": dict(tags),
            "params": [(k, str(v)[:6000]) for k, v in params.items()],
            "resume_run_id": resume_run_id, "config_yaml": config_yaml,
            "dataset": dataset.name if dataset else None,
            "splits": dataset_splits(dataset) if dataset else [],
            "dataset_source": dataset_source, "journal_mode": self.journal_mode,
        }
        try:
            writer = writer_process.claim(self._warn)
        except OSError as e:
            raise TrackingError(f"tracking.uri={self.uri}: cannot use the MLflow store (cannot "
                                f"start the MLflow writer process: {e})") from None
        try:
            reply = writer.call("start", spec)
        except CallFailed as e:
            writer_process.release(writer)
            raise TrackingError(str(e)) from None
        except WriterGone as e:
            raise TrackingError(f"tracking.uri={self.uri}: cannot use the MLflow store "
                                f"({e})") from None
        except BaseException:  # interrupted while waiting: the writer ends what it opened
            writer.abandon()
            raise
        self._writer, self._parent = writer, reply["run_id"]
        self._logged = set(reply["trials"])
        self._headline_first = resume_run_id is None
        self._spec = spec
        if self.sample_interval_s:
            from packexp.telemetry import ResourceSampler

            self._sampler = ResourceSampler(self.sample_interval_s).start()

    @property
    def _local(self) -> bool:
        return self.uri.startswith(("sqlite:", "file:")) or "://" not in self.uri

    def log_rung_plan(self, bracket: int, rung: int, epochs: float, packs: Sequence[Sequence[Any]],
                      done: Sequence[str] = (), name: str | None = None) -> None:
        """The strategy's packs for one rung, as ``packing/<name>.json`` on the parent (the
        plan's name: ``b<s>-r<rung>`` under Hyperband)."""
        name = name or f"b{bracket}-r{rung}"
        payload = {
            "bracket": bracket, "rung": rung, "epochs": epochs,
            "packs": [{"pack_id": f"{name}-p{j:02d}",
                       "members": [t.trial_id for t in group],
                       "hparams": [dict(t.hparams) for t in group]}
                      for j, group in enumerate(packs)],
            "done_before_resume": list(done),
        }
        self._post("log the packing plan", "log_rung_plan", payload,
                   f"packing/{name}{'-resumed' if done else ''}.json")

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
        now, step = now_ms(), round(epochs)
        self._send("log a trial's rung", "log_trial_rung", trial_id,
                   {k: str(v) for k, v in hparams.items()}, _strings(tags),
                   [(k, float(v), now, step) for k, v in metrics.items() if v is not None], now)
        self._logged.add(trial_id)

    def log_pack(self, index: int, pack: PackRecord, best: float | None = None,
                 epochs_spent: float | None = None, metric: str = "val_accuracy") -> None:
        """One finished pack's measurements on the parent run, ``step`` = ``index``.

        Also logs the best value so far of the objective's ``metric`` (as
        ``best_so_far_<metric>``) and the resource readings taken since the last call, so the
        UI plots them against wall time while the search runs; and the epochs spent so far,
        with the best so far again as ``best_so_far_by_epochs``, whose ``step`` is those
        epochs (rounded), to plot it against the budget used.
        """
        now = now_ms()
        values: dict[str, float | None] = {k: getattr(pack, k) for k in (
            "step_time_ms", "peak_rss_mb", "gpu_peak_memory_mb", "switch_overhead_s",
            "build_s", "trace_s", "train_s", "eval_s", "checkpoint_s", "probe_s",
            "duration_s", "predicted_s")}
        values["pack_memory_mb"] = pack.planned_cost_mb or None
        values["members"] = len(pack.members)
        values["fused"] = float(pack.fused)
        values["reused"] = float(pack.reused)
        values["reused_members"] = pack.reused_members
        values[f"best_so_far_{metric}"] = best
        values["epochs_spent"] = epochs_spent
        metrics = [(k, float(v), now, index) for k, v in values.items() if v is not None]
        if best is not None and epochs_spent is not None:
            metrics.append(("best_so_far_by_epochs", float(best), now,
                            round(epochs_spent)))
        self._post("log a pack", "log_metrics", metrics)
        self._flush_samples()

    def end_trial(self, trial_id: str, status: str) -> None:
        """Ends the trial's run: KILLED (cut by successive halving), FAILED or FINISHED."""
        if trial_id not in self._logged:
            self._pending[trial_id] = status  # retired before its first rung was logged
            return
        self._post("end a trial run", "end_trial", trial_id, status,
                   OUTCOMES.get(status, status.lower()), now_ms())

    def log_metrics(self, metrics: Mapping[str, float | None],
                    tags: Mapping[str, str] | None = None) -> None:
        """Metrics (and tags) on the parent run."""
        now = now_ms()
        self._post("log metrics", "log_metrics",
                   [(k, float(v), now, 0) for k, v in metrics.items() if v is not None],
                   dict(tags or {}))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A file or a folder's files, on the parent run; a missing path is skipped."""
        path = Path(path)
        if not path.exists():
            return
        self._post(f"log {path.name}", "log_artifact", str(path), artifact_path, path.is_dir())

    def log_model(self, model: KerasFile) -> dict[str, str] | None:
        """The kept model on the parent run as an MLflow Model of the Keras flavor, loadable
        as ``runs:/<run_id>/<artifact_path>`` and registered as ``register_as`` when set; the
        writer logs it while this process goes on (a warning if it cannot), and says its
        registered version in a log line; None once the store is lost."""
        if self._parent is None or self._lost:
            return None
        self._post(f"log the model {model.artifact_path}", "log_model", model, self.register_as)
        return {"uri": f"runs:/{self._parent}/{model.artifact_path}",
                **({"registered_as": self.register_as} if self.register_as else {})}

    def end(self, status: str = "FINISHED") -> None:
        """Ends the parent run and any trial run still open (``outcome`` = interrupted), once
        the writer has applied every call queued before; nothing once it has ended."""
        if self._parent is None:
            return
        if self._sampler is not None:
            self._sampler.stop()
            self._flush_samples()
            self._sampler = None
        writer, parent, self._writer, self._parent = self._writer, self._parent, None, None
        try:
            writer.call("end", status, now_ms())
        except WriterGone as e:
            self._writer_gone("end the run", e)
        except BaseException:  # interrupted while it drains: it goes on, and ends the runs
            writer.abandon()
            raise
        else:
            writer_process.release(writer)
        if self._lost:
            self._end_lost(parent)
        if self._warned:
            log.warning("%d MLflow calls failed in this run; its MLflow record is incomplete",
                        self._warned)

    def _flush_samples(self) -> None:
        if self._sampler is None:
            return
        metrics = []
        for sample in self._sampler.drain():
            metrics += [(k, float(v), sample.timestamp_ms, self._samples_logged)
                        for k, v in sample.metrics().items()]
            self._samples_logged += 1
        for i in range(0, len(metrics), 1000):  # MLflow takes 1000 metrics per batch
            self._post("log resource samples", "log_metrics", metrics[i : i + 1000])

    def _post(self, what: str, operation: str, *args: Any) -> None:
        self._safely(what, self._send, what, operation, *args)

    def _send(self, what: str, operation: str, *args: Any) -> None:
        if self._writer is None:
            raise WriterGone("no MLflow run is open")
        self._writer.send(what, operation, *args)

    def _safely(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            call(*args, **kwargs)
        except WriterGone as e:
            self._writer_gone(what, e)
        except Exception as e:
            self._warn(what, one_line(e))

    def _writer_gone(self, what: str, error: WriterGone) -> None:
        """Counted like any failed call, and said once: every later call fails the same way."""
        if self._lost:
            self._warned += 1
            return
        self._lost = str(error)
        self._warn(what, f"{error}; no later call reaches the store")

    @property
    def lost(self) -> str | None:
        return self._lost

    def _end_lost(self, parent: str) -> None:
        """After the writer died: a new one re-attaches to the runs it left RUNNING and ends
        them FAILED, so the store shows no run still going."""
        writer = None
        try:
            writer = writer_process.claim(self._warn)
            writer.call("start", {**self._spec, "resume_run_id": parent, "config_yaml": None,
                                  "splits": []})
            writer.call("log_metrics", [], {"tracking": "lost"})
            writer.call("end", "FAILED", now_ms())
        except (WriterGone, CallFailed, OSError) as e:
            log.warning("MLflow: could not end the runs the lost writer left open (%s)",
                        one_line(e))
        except BaseException:
            if writer is not None:
                writer.abandon()
            raise
        if writer is not None and writer.alive:
            writer_process.release(writer)

    def _warn(self, what: str, why: str) -> None:
        self._warned += 1
        log.warning("MLflow: could not %s (%s); the search goes on", what, why)


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


def dataset_inputs(dataset: Dataset, source: str | None = None) -> list[Any]:
    """The dataset as MLflow run inputs: its training and its validation arrays.

    Each has the dataset's name, a digest of its whole content (MLflow's own hashes a sample
    of rows) and a profile with the shapes; the context tag says which split it is.

    Args:
        dataset: The arrays the search trains and validates on.
        source: The file or folder they were read from; None for data made in code.
    """
    return split_inputs(dataset.name, dataset_splits(dataset), source)


def _prewarm_for_the_command_line() -> None:
    """Under ``python -m packexp`` the writer process starts as the command does, so MLflow
    imports beside TensorFlow instead of after it; not for a command that picks
    ``tracking=none`` or runs no job. (Hydra has not read the config yet: an experiment
    bundle that turns tracking off leaves a spare that is killed at exit.)"""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or spec.name != "packexp.__main__":
        return
    args = sys.argv[1:]
    if NO_JOB.intersection(args) or any(a.lstrip("+") == "tracking=none" for a in args):
        return
    writer_process.prewarm()


def _strings(tags: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in tags.items() if v is not None}


_prewarm_for_the_command_line()
