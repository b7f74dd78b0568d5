"""Experiment tracking: the only module that talks to MLflow."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised at start-up, before any training."""


class NullTracker:
    """Tracking turned off (``tracking=none``)."""

    run_id: str | None = None

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None) -> None:
        pass

    def log_trial_rung(
        self, trial_id: str, hparams: Mapping[str, Any], tags: Mapping[str, str],
        epochs: float, metrics: Mapping[str, float | None],
    ) -> None:
        pass

    def end_trial(self, trial_id: str, status: str) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        pass

    def log_artifact(self, path: Path) -> None:
        pass

    def end(self, status: str = "FINISHED") -> None:
        pass

    @property
    def location(self) -> str | None:
        return None


class MlflowTracker(NullTracker):
    """One parent run per invocation and one nested run per trial.

    Uses ``MlflowClient`` with explicit run ids, never the fluent active-run stack, so a
    failed job in a multirun cannot leave a run open for the next one.

    Args:
        uri: Tracking URI; None for the local store ``<store_dir>/mlflow.db``.
        experiment: MLflow experiment name that groups the runs.
        store_dir: Folder of the default local store and its artifacts.
    """

    def __init__(self, uri: str | None = None, experiment: str = "packexp",
                 store_dir: str = "outputs") -> None:
        self.store = Path(store_dir).resolve()
        self.uri = uri or f"sqlite:///{self.store / 'mlflow.db'}"
        self.experiment = experiment
        self._client = None
        self._parent: str | None = None
        self._experiment_id: str | None = None
        self._trial_runs: dict[str, str] = {}
        self._open: set[str] = set()

    @property
    def location(self) -> str:
        return self.uri

    @property
    def run_id(self) -> str | None:
        return self._parent

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None) -> None:
        """Opens the parent run, or re-attaches to ``resume_run_id`` and its trial runs."""
        # Fail within seconds on an unreachable server instead of retrying for minutes.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        if self.uri.startswith("sqlite:"):
            self.store.mkdir(parents=True, exist_ok=True)
        try:
            self._client = MlflowClient(tracking_uri=self.uri)
            found = self._client.get_experiment_by_name(self.experiment)
            if found is None:
                artifacts = (self.store / "mlartifacts").as_uri() if self._local else None
                self._experiment_id = self._client.create_experiment(
                    self.experiment, artifact_location=artifacts)
            else:
                self._experiment_id = found.experiment_id
            if resume_run_id is not None:
                self._reattach(resume_run_id)
                return
            run = self._client.create_run(self._experiment_id, run_name=run_name, tags=dict(tags))
        except TrackingError:
            raise
        except Exception as e:
            raise TrackingError(
                f"tracking.uri={self.uri}: cannot use the MLflow store ({e})") from e
        self._parent = run.info.run_id
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self._client.log_batch(self._parent, params=items[i : i + 100])

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
            self._trial_runs[child.info.run_name] = child.info.run_id
            if child.info.status == "RUNNING":
                self._open.add(child.info.run_name)
        log.info("re-attached to MLflow run %s and %d trial runs", run_id, len(children))

    @property
    def _local(self) -> bool:
        return self.uri.startswith(("sqlite:", "file:")) or "://" not in self.uri

    def log_trial_rung(
        self, trial_id: str, hparams: Mapping[str, Any], tags: Mapping[str, str],
        epochs: float, metrics: Mapping[str, float | None],
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client = self._client
        run_id = self._trial_runs.get(trial_id)
        if run_id is None:
            run = client.create_run(
                self._experiment_id, run_name=trial_id,
                tags={"mlflow.parentRunId": self._parent, **tags})
            run_id = self._trial_runs[trial_id] = run.info.run_id
            self._open.add(trial_id)
            client.log_batch(run_id, params=[Param(k, str(v)) for k, v in hparams.items()])
        step = round(epochs)
        client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), _now_ms(), step)
                     for k, v in metrics.items() if v is not None],
            tags=[RunTag(k, str(v)) for k, v in tags.items()],
        )

    def end_trial(self, trial_id: str, status: str) -> None:
        if trial_id in self._open:
            self._client.set_terminated(self._trial_runs[trial_id], status=status)
            self._open.discard(trial_id)

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        self._client.log_batch(
            self._parent, metrics=[Metric(k, float(v), _now_ms(), 0) for k, v in metrics.items()])

    def log_artifact(self, path: Path) -> None:
        self._client.log_artifact(self._parent, str(path))

    def end(self, status: str = "FINISHED") -> None:
        if self._parent is None:
            return
        for trial_id in list(self._open):
            self.end_trial(trial_id, "KILLED" if status == "FINISHED" else status)
        self._client.set_terminated(self._parent, status=status)
        self._parent = None


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
