"""Where packs train: in this process (``local``) or on a Ray cluster (``ray``)."""

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

__all__ = ["ATTEMPTS", "CacheView", "Executor", "ExecutorError", "LocalExecutor", "PackJob",
           "RayExecutor", "Trainer", "tensorflow_trainer"]


def __getattr__(name: str):
    # Ray is an optional extra: its module is imported only when chosen.
    if name == "RayExecutor":
        from packexp.executors.ray import RayExecutor

        return RayExecutor
    raise AttributeError(name)
