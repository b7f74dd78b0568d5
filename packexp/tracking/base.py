"""The tracker extension point: what a task and the search record about a run, and where."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packexp.data import Dataset


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised at start-up, before any training."""


class Tracker(abc.ABC):
    """Records one invocation as a parent run and each trial as a nested run.

    ``start`` may refuse the store (a ``TrackingError``); every later call must not stop a
    search, and ``end`` may be called again after the run has ended.
    """

    @abc.abstractmethod
    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        """Opens the parent run, or re-attaches to ``resume_run_id`` and its trial runs.

        Args:
            run_name: The parent run's name.
            params: The parent run's params.
            tags: The parent run's tags.
            resume_run_id: The parent run of the search being resumed, if any.
            config_yaml: The composed config, kept as ``config.yaml``.
            dataset: The arrays the search trains and validates on.
            dataset_source: Where the dataset was read from (a file or folder); None for
                data made in code (digits, synthetic).
        """

    @abc.abstractmethod
    def log_rung_plan(self, bracket: int, rung: int, epochs: float, packs: Sequence[Sequence[Any]],
                      done: Sequence[str] = ()) -> None:
        """The strategy's packs of trials for one rung; ``done``: trials a resume skips."""

    @abc.abstractmethod
    def log_trial_rung(
        self, trial_id: str, hparams: Mapping[str, Any], tags: Mapping[str, Any],
        epochs: float, metrics: Mapping[str, float | None],
    ) -> None:
        """The trial's scores after a rung; opens its run the first time.

        Args:
            trial_id: The trial; its nested run is named after it.
            hparams: The run's params, recorded when it opens.
            tags: Replace the run's tags of the same name (``rung``, ``pack_id``, ...).
            epochs: Epochs the trial has trained in all; the metrics' step.
            metrics: None values are left out.
        """

    @abc.abstractmethod
    def log_pack(self, index: int, pack: Mapping[str, Any],
                 best_val_accuracy: float | None = None) -> None:
        """One finished pack's measurements on the parent run, ``step`` = ``index``."""

    @abc.abstractmethod
    def end_trial(self, trial_id: str, status: str) -> None:
        """Ends the trial's run: KILLED (cut by successive halving), FAILED or FINISHED."""

    @abc.abstractmethod
    def log_metrics(self, metrics: Mapping[str, float | None]) -> None:
        """The parent run's metrics; None values are left out."""

    @abc.abstractmethod
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A file or a folder's files, on the parent run; a missing path is skipped."""

    @abc.abstractmethod
    def end(self, status: str = "FINISHED") -> None:
        """Ends the parent run and any trial run still open; nothing once it has ended."""

    @property
    @abc.abstractmethod
    def location(self) -> str | None:
        """Where the runs are kept, for the summary; None when nowhere."""

    @property
    @abc.abstractmethod
    def run_id(self) -> str | None:
        """The parent run's id while it is open, which a resume re-attaches to."""


def hydra_tags() -> dict[str, str]:
    """Where the run sits in a Hydra sweep (``sweep_dir``, ``job_num``) and its overrides."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
    except ValueError:
        return {}
    tags = {"overrides": " ".join(hydra.overrides.task) or "(none)"}
    if str(hydra.mode) == "RunMode.MULTIRUN":
        tags.update(sweep_dir=str(Path(hydra.sweep.dir).resolve()), job_num=str(hydra.job.num))
    return tags
