"""Command line: ``python -m packexp [overrides]``."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from packexp.errors import ConfigError, ExecutorError
from packexp.tracking import TrackingError


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow and finds its devices with the C++ start-up banner muted.

    TensorFlow 2.21 prints it on stderr before Python logging exists, whatever
    TF_CPP_MIN_LOG_LEVEL says. Errors still surface: they are Python exceptions.
    """
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow as tf

            tf.config.list_logical_devices()  # probes CUDA, which logs when there is none
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from packexp.run import run

    _import_tensorflow_quietly()
    try:
        return run(cfg)
    except (ConfigError, ExecutorError, TrackingError) as e:
        print(f"packexp: error: {e}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # the launcher records the failed job and runs the rest of the sweep
        sys.exit(2)


if __name__ == "__main__":
    main()
