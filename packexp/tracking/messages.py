"""The messages between a tracker and its MLflow writer process (``writer_process.py``,
``mlflow_writer.py``), typed: a ``Call`` one way, a ``Reply`` the other. No MLflow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Call:
    """A tracker's call for the writer, ``operation(*args)``. ``what`` says it in words for
    the report if it fails; None: the tracker waits for its result (``Result`` or ``Error``)."""

    operation: str
    args: tuple = ()
    what: str | None = None


@dataclass(frozen=True)
class Result:
    """What a call the tracker waited for returned."""

    value: Any


@dataclass(frozen=True)
class Error:
    """A call the tracker waited for failed: why, in one line."""

    why: str


@dataclass(frozen=True)
class Failed:
    """A queued call failed: ``what`` it was to do, and why."""

    what: str
    why: str


@dataclass(frozen=True)
class LogLine:
    """One of the writer's log records, for the tracker's process to log."""

    logger: str
    level: int
    message: str


Reply = Result | Error | Failed | LogLine
