"""Tracking off (``tracking=none``): the tracker that records nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packexp.tracking.base import Tracker

if TYPE_CHECKING:
    from packexp.data import Dataset


class NullTracker(Tracker):
    """The null tracker: every call does nothing."""

    def __init__(self, **settings: Any) -> None:
        # Accepts and ignores the store settings (an experiment bundle may set
        # tracking.experiment), so tracking=none works with any of them.
        del settings

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        pass

    def log_rung_plan(self, bracket: int, rung: int, epochs: float, packs: Sequence[Sequence[Any]],
                      done: Sequence[str] = ()) -> None:
        pass

    def log_trial_rung(
        self, trial_id: str, hparams: Mapping[str, Any], tags: Mapping[str, Any],
        epochs: float, metrics: Mapping[str, float | None],
    ) -> None:
        pass

    def log_pack(self, index: int, pack: Mapping[str, Any],
                 best_val_accuracy: float | None = None) -> None:
        pass

    def end_trial(self, trial_id: str, status: str) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float | None]) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        pass

    def end(self, status: str = "FINISHED") -> None:
        pass

    @property
    def location(self) -> str | None:
        return None

    @property
    def run_id(self) -> str | None:
        return None
