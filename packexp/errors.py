"""Errors that packexp reports to the user as one line."""

from __future__ import annotations

import sys
from typing import NoReturn


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names it."""


class ExecutorError(RuntimeError):
    """Packs that could not be trained where they were sent; the message says why."""


def refuse(message: str) -> NoReturn:
    """Ends the command with ``message`` as its one line on stderr and exit code 2, as every
    configuration error (where Hydra would otherwise print a traceback)."""
    print(f"packexp: error: {message}", file=sys.stderr)
    sys.exit(2)
