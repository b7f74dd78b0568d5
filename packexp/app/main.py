"""A job: checks the task and the seed, settles the run directory and runs the task."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from packexp.app.muted import muted_stderr
from packexp.app.session import (
    make_dir,
    refuse_run_dir,
    refused,
    resume_needs_a_run_dir,
    run_dir_given,
)
from packexp.app.tasks import TASKS
from packexp.app.tasks.refit import check_settings as check_refit
from packexp.app.tasks.refit import keep_run_config
from packexp.config import check_search, config_errors, fit_dataset_to_model
from packexp.config.run import RunSettings
from packexp.errors import ConfigError, flag, is_number
from packexp.executors.base import tensorflow_trainer
from packexp.startup import mark

__all__ = ["TASKS", "RunDirCheck", "check", "job", "run"]

log = logging.getLogger("packexp")



def job(cfg: DictConfig, trainer: Any = None) -> float:
    """A job of ``python -m packexp`` or ``packexp.tune``: the config checked before TensorFlow
    loads (a bad value is reported at once), what trains started (``Trainer.start``: TensorFlow
    for its trainer, nothing for one that needs none, as ``trainer`` or the one the executor's
    config names: ``run``), and the task run in Hydra's run directory."""
    with config_errors():
        check(cfg)
        if trainer is None and cfg.get("task") in ("tune", "refit", "plan"):
            from packexp.config.components import named_trainer

            trainer = named_trainer(cfg)  # executor=simulated's fake: no TensorFlow to start
    mark("composition")

    def tensorflow() -> None:
        start_tensorflow(use_gpu=trains_here(cfg))
        mark("tensorflow")

    (trainer if trainer is not None else tensorflow_trainer()).start(tensorflow)
    return run(cfg, trainer=trainer)


def check(cfg: DictConfig) -> RunSettings:
    """The checks that need no TensorFlow: the run's settings read once (``RunSettings``:
    the seed, the task, keep, refit, summary, budget), a search's settings, and the device's
    (``python -m packexp`` makes them before TensorFlow loads; the search checks its
    settings again as it instantiates them). Returns the run's settings."""
    settings = RunSettings.of(cfg)
    if settings.task in ("tune", "plan"):
        check_search(cfg)
    check_run_settings(cfg)
    return settings


def check_run_settings(cfg: DictConfig) -> None:
    """Top-level, preprocessing and device settings a library would otherwise meet late
    (once TensorFlow has started) or only on some machines (a GPU's memory share on a CPU:
    ``packing.memory`` checks the share of the device at hand again), beyond ``RunSettings``'
    own. A key the config leaves out or null is not checked."""
    check_refit(cfg)
    if (flip := OmegaConf.select(cfg, "preprocess.flip")) is not None:
        flag("preprocess.flip", flip, error=ConfigError)
    if ((fraction := OmegaConf.select(cfg, "device.gpu_memory_fraction")) is not None
            and not (is_number(fraction) and 0 < fraction <= 1)):
        raise ConfigError(f"device.gpu_memory_fraction={fraction!r}: must be a number in (0, 1]")
    if ((budget := OmegaConf.select(cfg, "device.memory_budget_mb")) is not None
            and not (is_number(budget) and budget > 0)):  # null: a GPU's share only
        raise ConfigError(f"device.memory_budget_mb={budget!r}: must be a positive number of MB")


def run(cfg: DictConfig, run_dir: str | Path | None = None, trainer: Any = None) -> float:
    """Runs ``cfg.task``.

    Args:
        cfg: The composed config.
        run_dir: Where outputs go; Hydra's run directory when None.
        trainer: What trains the packs of a search, its plan or a refit (``executors.Trainer``):
            TensorFlow's when None; ``packexp.testing.FakeTrainer`` runs a whole search
            without TensorFlow.

    Returns:
        The task's objective: for ``tune``, the best validation accuracy found.
    """
    with config_errors():
        task = check(cfg).task
        if run_dir is None:
            from hydra.core.hydra_config import HydraConfig

            run_dir = HydraConfig.get().runtime.output_dir
        run_dir = Path(run_dir)
        fit_dataset_to_model(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        if trainer is None:
            return TASKS[task](cfg, run_dir)
        if task not in ("tune", "refit", "plan"):
            raise ConfigError(f"task={task}: trains with TensorFlow's trainer only")
        return TASKS[task](cfg, run_dir, trainer=trainer)


class RunDirCheck(Callback):
    """Refuses a run before Hydra writes in its directory: a value ``check`` refuses, a
    ``resume=true`` that names no directory, a directory that cannot be made, a search
    that cannot start in it (``session.check_run_dir``) and a run ``task=refit`` cannot refit
    (``tasks.refit.keep_run_config``, which also keeps the run's ``.hydra`` files), so that
    a refused run leaves no files and a refused resume leaves the run's ``.hydra`` files and
    log as they were. One line and exit code 2, as every configuration error."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        with refused():
            with config_errors():
                check(config)
            if config.get("resume", False) and not run_dir_given(config):
                raise ConfigError(resume_needs_a_run_dir(Path(str(config.hydra.run.dir)).parent))
            if config.get("task") == "refit":
                keep_run_config(config)
            refuse_run_dir(config)
            make_dir("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with refused():
            make_dir("hydra.sweep.dir", config.hydra.sweep.dir)


def start_tensorflow(use_gpu: bool = True) -> None:
    """Imports TensorFlow and finds its devices with the C++ start-up banner muted.

    TensorFlow 2.21 prints it on stderr before Python logging exists, whatever
    TF_CPP_MIN_LOG_LEVEL says. Errors still surface: they are Python exceptions. The GPU's
    free memory is read first, before TensorFlow claims it; without ``use_gpu`` (the
    executor's workers train) TensorFlow is kept off the GPU here.
    """
    from packexp import telemetry

    telemetry.note_free_gpu_memory()
    shared = False
    with muted_stderr():
        import tensorflow as tf

        if not use_gpu:
            try:
                telemetry.leave_gpu()
            except RuntimeError:
                shared = True
        left = use_gpu and telemetry.gpu_left()
        tf.config.list_logical_devices()  # probes CUDA, which logs when there is none
    if shared:
        log.warning("an earlier job of this multirun started TensorFlow on the GPU, so this "
                    "driver keeps a share of it; give Ray jobs processes of their own "
                    "(hydra/launcher=joblib)")
    if left:
        log.warning("an earlier job of this multirun left the GPU to Ray workers; this job "
                    "trains on the CPU (hydra/launcher=joblib runs each job in a process of "
                    "its own)")


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
