"""The MLflow writer process's entry point (``python -c ... main(fd, main_file)``, started by
``writer_process``): its signals ignored, its inbox filled by a listening thread, its log
records forwarded to the tracker's process, and the writer (``mlflow_writer``) serving."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

from packexp.tracking.messages import LogLine, Reply
from packexp.tracking.mlflow_writer import MlflowWriter


class _Forward(logging.Handler):
    """Sends the writer's log records to the tracker's process, which logs them there."""

    def __init__(self, post: Callable[[Reply], None]) -> None:
        super().__init__()
        self._post = post

    def emit(self, record: logging.LogRecord) -> None:
        self._post(LogLine(record.name, record.levelno, record.getMessage()))


def _listen(connection: Connection, inbox: queue.SimpleQueue) -> None:
    """Moves the tracker's calls into ``inbox`` as they come, so its sends never wait; None
    once its process is gone (its end closed, or this process handed to another parent)."""
    parent = os.getppid()
    while True:
        try:
            if connection.poll(1.0):
                inbox.put(connection.recv())
                continue
        except (EOFError, OSError):
            break
        if os.getppid() != parent:
            break
    inbox.put(None)


def main(fd: int, main_file: str) -> None:
    """The writer process: serves the tracker at the other end of file descriptor ``fd``;
    ``main_file`` is the tracker's ``sys.argv[0]``, where MLflow looks for a git commit."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the tracker ends the runs; this drains
    sys.argv = [main_file]
    # No progress bar per artifact where tqdm is installed: the tracker's stderr is the user's.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # Nor MLflow's INFO lines ("Creating initial MLflow database tables..."): its warnings
    # and errors still show, and MLFLOW_LOGGING_LEVEL set by the user holds.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    connection = Connection(fd)
    lock = threading.Lock()

    def post(message: Reply) -> None:
        with lock, contextlib.suppress(OSError):
            connection.send(message)

    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_listen, args=(connection, inbox), daemon=True).start()
    packexp_log = logging.getLogger("packexp")
    packexp_log.addHandler(_Forward(post))
    packexp_log.setLevel(logging.INFO)
    packexp_log.propagate = False
    writer = MlflowWriter(post)
    with contextlib.suppress(Exception):  # a failure here is met again, and told, at start
        writer.warm_up()
    writer.serve(inbox)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every call is committed; skip tearing down MLflow's modules
