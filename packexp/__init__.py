"""packexp: packed neural-network training for hyper-parameter search.

From Python: ``packexp.tune(...)`` runs a search and returns a ``SearchResult``;
``packexp.load(run_dir)`` reads a finished one back (README, "From Python");
``packexp.refit(run_dir)`` trains its best configuration again on every row;
``packexp.to_optuna(run_dir, storage)`` writes it as an Optuna study and returns it.
"""

from __future__ import annotations

import os
from typing import Any

from packexp import moved
from packexp.app import muted

# TensorFlow's C++ log lines stay off a terminal and a notebook unless asked for: this holds
# when packexp is imported before TensorFlow (python -m packexp; import packexp first), and
# its start-up banner is muted whoever imports it (packexp.app.muted).
muted.install()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
moved.install()  # the paths an earlier release named import, with a warning (packexp.moved)

from packexp.errors import ConfigError, ExecutorError  # noqa: E402

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)


__all__ = [
    "ConfigError",
    "ExecutorError",
    "SearchResult",
    "TrackingError",
    "conf_dir",
    "load",
    "refit",
    "to_optuna",
    "tune",
]

# Loaded when first used: ``import packexp`` stays light for the command line and workers.
_LAZY = {"conf_dir": "packexp.files", "tune": "packexp.app.api", "refit": "packexp.app.api",
         "load": "packexp.app.api",
         "to_optuna": "packexp.app.optuna_study",
         "SearchResult": "packexp.records.search_result", "TrackingError": "packexp.tracking.base"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'packexp' has no attribute {name!r}")
