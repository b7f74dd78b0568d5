"""The Hydra application ``python -m packexp [overrides]`` runs (``packexp/__main__.py``
starts it once Ctrl-C and SIGTERM are handled)."""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from packexp.app.help import register_help_resolvers
from packexp.app.interrupts import (
    exit_interrupted,
    job_place,
    job_resume_command,
    job_task,
    sigterm_interrupts,
)
from packexp.config import register_resolvers
from packexp.errors import ConfigError, ExecutorError, refuse
from packexp.files import conf_dir
from packexp.tracking import TrackingError

# Errors of the place a run writes to, not of packexp: one line naming the file.
PLACE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO})

# The configs (an absolute path: this module is imported, not run as a script).
CONF = conf_dir()
register_resolvers()
register_help_resolvers()  # --help's sections (conf/config.yaml's hydra.help.template)


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> float:
    from packexp.app.main import job

    logging.raiseExceptions = False  # a log file on a full disk must not print tracebacks
    hydra_cfg = HydraConfig.get()
    job_place.append((Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task),
                      Path(hydra_cfg.runtime.cwd)))
    job_task.append(str(cfg.get("task")))  # after its place: a known task has a place
    try:
        with sigterm_interrupts():
            return job(cfg)
    except (ConfigError, ExecutorError, TrackingError) as e:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            print(f"packexp: error: {e}", file=sys.stderr)
            raise  # the launcher records the failed job and runs the rest of the sweep
        refuse(str(e))
    except KeyboardInterrupt as interrupt:
        # SystemExit passes Hydra's launchers, which record only Exceptions: a sweep stops.
        exit_interrupted(interrupt, str(cfg.get("task")))
    except OSError as e:
        if e.errno not in PLACE_ERRORS:
            raise  # a fault of packexp's: its traceback
        print(f"packexp: error: {e.filename}: {e.strerror}" + (
            f"; once that is fixed, resume with {resume}" if (resume := job_resume_command())
            else ""), file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise
        sys.exit(1)

