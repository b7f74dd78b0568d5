"""Ctrl-C and SIGTERM as exceptions in the main thread, remembered so that one Python
swallows (in a finalizer) is raised again at the driver's next dispatch. The runner checks
here (``raise_if_interrupted``); the command line installs the handlers and says what an
interrupt left behind (``packexp/app/interrupts.py``)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt``, so the same
    ``finally`` blocks run: the journal stays whole and the MLflow runs end ``KILLED``."""


# The interrupts raised by ``_interrupt`` (their signals), so that one Python swallowed is
# raised again at the driver's next dispatch (``raise_if_interrupted``).
_received: list[int] = []
_holding: list[int] = []  # open ``held`` blocks: each holds the count received before it
def _interrupt(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if not _holding:
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def held() -> Iterator[None]:
    """Holds Ctrl-C and SIGTERM while the block runs and raises the one received when it
    ends: for steps a reader must find all done or none (``results.json`` and the journal's
    ``finished`` record, which a resume and the interrupted line read)."""
    _holding.append(len(_received))
    try:
        yield
    finally:
        before = _holding.pop()
    if len(_received) > before and not _holding:
        raise Terminated if _received[-1] == signal.SIGTERM else KeyboardInterrupt


def raising_interrupts() -> None:
    """From now on Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM ``Terminated`` in the main
    thread, and each is remembered (the command line's first act, so an interrupt while it
    imports ends as one later does). One raised in a finalizer, which Python cannot raise
    further, prints nothing: it is raised again at the driver's next dispatch or, after the
    job, by the command line (``raise_if_interrupted``)."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    sys.unraisablehook = _quiet_interrupts


_unraisablehook = sys.unraisablehook


def _quiet_interrupts(unraisable) -> None:
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and _received):
        _unraisablehook(unraisable)


def raise_if_interrupted() -> None:
    """Raises again an interrupt that never reached the job: raised while Python ran a
    finalizer (a TensorFlow object's ``__del__``, a weakref callback), which prints
    "Exception ignored" and goes on without it (one way a Ctrl-C mid-search can be lost).
    The driver calls this before it dispatches a pack: a lost interrupt stops the search one
    pack later."""
    if _received:
        raise Terminated if _received[-1] == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``Terminated``; the previous handler returns after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    _received.clear()  # an earlier job's (packexp.tune in one notebook kernel)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's convention, 128 plus the signal's number: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
