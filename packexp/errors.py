"""Errors that packexp reports to the user as one line, and the checks of settings that every
layer shares: each names its key and value in one line."""

from __future__ import annotations

import math
import sys
from typing import Any, NoReturn


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names it."""


class ExecutorError(RuntimeError):
    """Packs that could not be trained where they were sent; the message says why."""


def refuse(message: str) -> NoReturn:
    """Ends the command with ``message`` as its one line on stderr and exit code 2, as every
    configuration error (where Hydra would otherwise print a traceback)."""
    print(f"packexp: error: {message}", file=sys.stderr)
    sys.exit(2)


def positive_int(key: str, value: Any, minimum: int = 1, optional: bool = False,
                 error: type[Exception] = ValueError, why: str = "") -> Any:
    """``value`` if it is an integer at least ``minimum`` (or None, when ``optional``);
    raises ``error`` naming ``key`` otherwise (``why`` ends its message). A bool is not an
    integer here."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        null = "null or " if optional else ""
        raise error(f"{key}={value!r}: must be {null}an integer >= {minimum}{why}")
    return value


def is_number(value: Any) -> bool:
    """An int or float that is finite, and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def flag(key: str, value: Any, error: type[Exception] = ValueError) -> bool:
    """``value`` if it is a bool; raises ``error`` naming ``key`` otherwise."""
    if not isinstance(value, bool):
        raise error(f"{key}={value!r}: must be true or false")
    return value


def one_of(key: str, value: Any, allowed: tuple, error: type[Exception] = ValueError) -> Any:
    """``value`` if it is one of ``allowed``; raises ``error`` naming ``key`` otherwise."""
    if value not in allowed:
        raise error(f"{key}={value!r}: must be {' or '.join(map(str, allowed))}")
    return value
