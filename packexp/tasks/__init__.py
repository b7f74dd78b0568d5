"""The tasks ``cfg.task`` chooses: each one module, each ``(cfg, run_dir) -> objective``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from packexp.tasks.plan import plan
from packexp.tasks.profile import profile
from packexp.tasks.refit import refit
from packexp.tasks.tune import tune

TASKS: dict[str, Callable[[DictConfig, Path], float]] = {"tune": tune, "plan": plan,
                                                         "profile": profile, "refit": refit}

__all__ = ["TASKS"]
