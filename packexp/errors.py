"""Errors that packexp reports to the user as one line."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names it."""


class ExecutorError(RuntimeError):
    """Packs that could not be trained where they were sent; the message says why."""
