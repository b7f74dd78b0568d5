"""Tracking off (``tracking=none``): the tracker that records nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from packexp.tracking.base import Tracker

if TYPE_CHECKING:
    from packexp.data import Dataset


class NullTracker(Tracker):
    """The null tracker: hears every event and keeps none."""

    def __init__(self, **settings: Any) -> None:
        # Accepts and ignores the store settings (an experiment bundle may set
        # tracking.experiment), so tracking=none works with any of them.
        del settings

    def start(self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str],
              resume_run_id: str | None = None, config_yaml: str | None = None,
              dataset: Dataset | None = None, dataset_source: str | None = None) -> None:
        pass

    def end(self, status: str = "FINISHED") -> None:
        pass
