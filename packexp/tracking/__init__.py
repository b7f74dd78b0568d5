"""Experiment tracking: the ``Tracker`` extension point, one implementation per module."""

from packexp.tracking.base import Tracker, TrackingError, hydra_tags, run_params
from packexp.tracking.mlflow_tracker import MlflowTracker
from packexp.tracking.models import KerasFile, keras_file, log_model_file
from packexp.tracking.null import NullTracker

__all__ = ["KerasFile", "MlflowTracker", "NullTracker", "Tracker", "TrackingError", "hydra_tags",
           "keras_file", "log_model_file", "run_params"]
