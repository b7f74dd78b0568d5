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
from packexp.interrupts import exit_interrupted, sigterm_interrupts
from packexp.tracking import TrackingError


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from packexp.run import job

    try:
        with sigterm_interrupts():
            return job(cfg)
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
