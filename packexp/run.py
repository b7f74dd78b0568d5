"""The runner: checks the task and the seed, settles the run directory and runs the task."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from packexp.config import check_search, fit_dataset_to_model
from packexp.errors import ConfigError
from packexp.tasks import TASKS

__all__ = ["TASKS", "check", "run"]


def check(cfg: DictConfig) -> None:
    """The checks that need no TensorFlow: the seed, the task, and a search's settings
    (``python -m packexp`` makes them before TensorFlow loads; the search checks its
    settings again as it instantiates them)."""
    if check_task(cfg) in ("tune", "plan"):
        check_search(cfg)


def check_task(cfg: DictConfig) -> str:
    """The seed and the task, checked; returns the task."""
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed={seed!r}: must be an integer")
    task = cfg.get("task")
    if task not in TASKS:
        raise ConfigError(f"task={task!r}: must be one of {sorted(TASKS)}")
    return task


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float:
    """Runs ``cfg.task``.

    Args:
        cfg: The composed config.
        run_dir: Where outputs go; Hydra's run directory when None.

    Returns:
        The task's objective: for ``tune``, the best validation accuracy found.
    """
    task = check_task(cfg)
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    run_dir = Path(run_dir)
    fit_dataset_to_model(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    return TASKS[task](cfg, run_dir)
