"""The tracker's end of the MLflow writer process (``mlflow_writer.py``): starting it, queuing
calls to it, hearing back its failures, and the spare writer a command starts early."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Pipe
from pathlib import Path
from typing import Any

from packexp.tracking.messages import Call, Error, Failed, LogLine, Result

log = logging.getLogger(__name__)


class WriterGone(RuntimeError):
    """The writer process has ended, or never started: nothing more reaches the store."""


class CallFailed(RuntimeError):
    """A call the tracker waited for failed in the writer; the message says why."""


class WriterProcess:
    """The tracker's end of one writer process: queues calls, hears back failures."""

    def __init__(self) -> None:
        ours, theirs = Pipe()
        root = str(Path(__file__).resolve().parents[2])  # the writer imports this packexp
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            # No garbage collection while the writer imports (its warm-up turns it back on).
            [sys.executable, "-c", "import gc, sys; gc.disable(); from "
             "packexp.tracking.writer_main import main; main(int(sys.argv[1]), sys.argv[2])",
             str(theirs.fileno()),
             sys.argv[0] if sys.argv else ""],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path})
        theirs.close()
        self._connection = ours
        self._lock = threading.Lock()
        self.owner = os.getpid()
        self.used = False
        self.report: Callable[[str, str], None] = _report_unclaimed

    @property
    def alive(self) -> bool:
        return self._process.poll() is None and not self._connection.closed

    @property
    def pid(self) -> int:
        return self._process.pid

    def send(self, what: str, operation: str, *args: Any) -> None:
        """Queues a call; if the writer cannot apply it, ``report(what, why)`` says so later."""
        with self._lock:
            self._receive(until_result=False)
            self._post(Call(operation, args, what))

    def call(self, operation: str, *args: Any) -> Any:
        """Applies a call after everything queued before it, and returns what it returns.

        Raises:
            CallFailed: The call failed in the writer.
            WriterGone: The writer process has ended.
        """
        with self._lock:
            self.used = True
            self._post(Call(operation, args))
            return self._receive(until_result=True)

    def close(self, timeout: float = 60.0) -> None:
        """Lets the writer apply what is queued and exit; waits for it up to ``timeout`` s."""
        with contextlib.suppress(OSError):
            self._connection.send(Call("close"))
        self._connection.close()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("the MLflow writer (pid %d) is still busy after %.0f s; left running",
                        self._process.pid, timeout)

    def kill(self) -> None:
        """Ends a writer that holds no run (a spare that was never used) at once."""
        self._connection.close()
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait()

    def abandon(self) -> None:
        """Closes this end without a word: the writer ends the runs left open as KILLED."""
        self._connection.close()

    def _post(self, message: Call) -> None:
        try:
            self._connection.send(message)
        except OSError:
            raise WriterGone(self._gone()) from None

    def _receive(self, until_result: bool) -> Any:
        try:
            while until_result or self._connection.poll():
                reply = self._connection.recv()
                if isinstance(reply, Result):
                    return reply.value
                if isinstance(reply, Error):
                    raise CallFailed(reply.why)
                if isinstance(reply, Failed):
                    self.report(reply.what, reply.why)
                elif isinstance(reply, LogLine):
                    logging.getLogger(reply.logger).log(reply.level, "%s", reply.message)
        except (EOFError, OSError):
            raise WriterGone(self._gone()) from None
        return None

    def _gone(self) -> str:
        code = self._process.poll()
        return ("the MLflow writer process has ended" if code is None
                else f"the MLflow writer process ended with exit code {code}")


def _report_unclaimed(what: str, why: str) -> None:
    log.warning("MLflow: could not %s (%s)", what, why)


# One idle writer per process: started early by ``prewarm`` or kept by ``release`` for the
# next tracker (a multirun's next job), so a tracker rarely waits for MLflow to import.
_spare: WriterProcess | None = None
_spare_lock = threading.Lock()


def prewarm() -> None:
    """Starts the spare writer now, so it imports MLflow while this process does other work."""
    global _spare
    with _spare_lock:
        if _spare is None or not _spare.alive:
            _spare = WriterProcess()


def claim(report: Callable[[str, str], None]) -> WriterProcess:
    """The spare writer, or a new one; ``report(what, why)`` hears of its failed calls."""
    global _spare
    with _spare_lock:
        writer, _spare = _spare, None
    if writer is None or not writer.alive or writer.owner != os.getpid():
        writer = WriterProcess()
    writer.report = report
    return writer


def release(writer: WriterProcess) -> None:
    """Takes back a writer whose runs have ended: the spare, if there is none yet."""
    global _spare
    writer.report = _report_unclaimed
    with _spare_lock:
        if _spare is None and writer.alive and writer.owner == os.getpid():
            _spare, writer = writer, None
    if writer is not None:
        writer.close()


@atexit.register
def close_spare() -> None:
    """Ends the spare writer: at once if it never served a tracker, else once it is idle."""
    global _spare
    with _spare_lock:
        writer, _spare = _spare, None
    if writer is None or writer.owner != os.getpid():
        return
    try:
        if writer.used:
            writer.close()
        else:
            writer.kill()
    except KeyboardInterrupt:
        # Ctrl-C at exit (packexp.tune's process): a spare holds no open run, so ending it
        # now loses nothing, and an atexit hook must not end in a traceback.
        writer.kill()


def _forget_spare() -> None:
    global _spare
    _spare = None  # a forked child must not talk over its parent's writer


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_spare)
