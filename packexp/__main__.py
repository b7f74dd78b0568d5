"""Command line: ``python -m packexp [overrides]``."""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from packexp.errors import ConfigError, ExecutorError
from packexp.interrupts import exit_interrupted, sigterm_interrupts
from packexp.tracking import TrackingError

log = logging.getLogger("packexp")


def _import_tensorflow_quietly(use_gpu: bool = True) -> None:
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


def _trains_here(cfg: DictConfig) -> bool:
    """Whether packs train in this process: anything but a search on an executor whose
    workers train (a bad executor is reported where it is instantiated)."""
    from hydra.utils import get_class

    if cfg.get("task") != "tune":
        return True  # profiles and plans run here whatever the executor
    try:
        return bool(get_class(cfg.executor._target_).trains_here)
    except Exception:
        return True


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from packexp.run import check, run

    try:
        with sigterm_interrupts():
            check(cfg)  # before TensorFlow loads: a bad value is reported at once
            _import_tensorflow_quietly(use_gpu=_trains_here(cfg))
            return run(cfg)
    except (ConfigError, ExecutorError, TrackingError) as e:
        print(f"packexp: error: {e}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # the launcher records the failed job and runs the rest of the sweep
        sys.exit(2)
    except KeyboardInterrupt as interrupt:
        # SystemExit passes Hydra's launchers, which record only Exceptions: a sweep stops.
        exit_interrupted(interrupt, str(cfg.get("task")))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as interrupt:  # outside a job: while Hydra composes, say
        exit_interrupted(interrupt, None)
