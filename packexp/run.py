"""The runner: checks the task and the seed, settles the run directory and runs the task."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from packexp.config import check_search, config_errors, fit_dataset_to_model
from packexp.errors import ConfigError
from packexp.tasks import TASKS

__all__ = ["TASKS", "check", "job", "run"]

log = logging.getLogger("packexp")


def job(cfg: DictConfig) -> float:
    """A job of ``python -m packexp`` or ``packexp.tune``: the config checked before TensorFlow
    loads (a bad value is reported at once), TensorFlow started, and the task run in Hydra's
    run directory."""
    with config_errors():
        check(cfg)
    start_tensorflow(use_gpu=trains_here(cfg))
    return run(cfg)


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
    with config_errors():
        task = check_task(cfg)
        if run_dir is None:
            from hydra.core.hydra_config import HydraConfig

            run_dir = HydraConfig.get().runtime.output_dir
        run_dir = Path(run_dir)
        fit_dataset_to_model(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        return TASKS[task](cfg, run_dir)


def start_tensorflow(use_gpu: bool = True) -> None:
    """Imports TensorFlow and finds its devices with the C++ start-up banner muted.

    TensorFlow 2.21 prints it on stderr before Python logging exists, whatever
    TF_CPP_MIN_LOG_LEVEL says. Errors still surface: they are Python exceptions. The GPU's
    free memory is read first, before TensorFlow claims it; without ``use_gpu`` (the
    executor's workers train) TensorFlow is kept off the GPU here.
    """
    from packexp import telemetry

    telemetry.note_free_gpu_memory()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow as tf

            if not use_gpu:
                try:
                    telemetry.leave_gpu()
                except RuntimeError:
                    log.warning("an earlier job of this multirun started TensorFlow on the "
                                "GPU, so this driver keeps a share of it; give Ray jobs "
                                "processes of their own (hydra/launcher=joblib)")
            elif telemetry.gpu_left():
                log.warning("an earlier job of this multirun left the GPU to Ray workers; "
                            "this job trains on the CPU (hydra/launcher=joblib runs each job "
                            "in a process of its own)")
            tf.config.list_logical_devices()  # probes CUDA, which logs when there is none
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def trains_here(cfg: DictConfig) -> bool:
    """Whether packs train in this process: anything but a search on an executor whose
    workers train (a bad executor is reported where it is instantiated)."""
    from hydra.utils import get_class

    if cfg.get("task") != "tune":
        return True  # profiles and plans run here whatever the executor
    try:
        return bool(get_class(cfg.executor._target_).trains_here)
    except Exception:
        return True
