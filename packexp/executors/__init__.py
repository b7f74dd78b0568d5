"""Where packs train: in this process (``local``), on a Ray cluster (``ray``), or on a simulated
cluster whose times are predictions (``simulated``)."""

from packexp.executors.base import (
    ATTEMPTS,
    CacheView,
    Executor,
    ExecutorError,
    PackJob,
    Trainer,
    tensorflow_trainer,
)
from packexp.executors.local import LocalExecutor
from packexp.executors.simulated import SimulatedExecutor

__all__ = ["ATTEMPTS", "CacheView", "Executor", "ExecutorError", "LocalExecutor", "PackJob",
           "RayExecutor", "SimulatedExecutor", "Trainer", "tensorflow_trainer"]


def __getattr__(name: str):
    # Ray is an optional extra: its module is imported only when chosen.
    if name == "RayExecutor":
        from packexp.executors.ray import RayExecutor

        return RayExecutor
    raise AttributeError(name)
