"""Experiment tracking: the ``Tracker`` extension point, one implementation per module."""

from packexp.tracking.base import Tracker, TrackingError, hydra_tags, run_params
from packexp.tracking.mlflow_tracker import MlflowTracker
from packexp.tracking.null import NullTracker

__all__ = ["MlflowTracker", "NullTracker", "Tracker", "TrackingError", "hydra_tags",
           "run_params"]
