"""The tasks ``cfg.task`` chooses: each one module, each ``(cfg, run_dir) -> objective``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from packexp.app.tasks.plan import plan
from packexp.app.tasks.profile import profile
from packexp.app.tasks.refit import refit
from packexp.app.tasks.tune import tune

TASKS: dict[str, Callable[[DictConfig, Path], float]] = {"tune": tune, "plan": plan,
                                                         "profile": profile, "refit": refit}

__all__ = ["TASKS"]
