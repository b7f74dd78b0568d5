"""``python -m packexp`` in a child process (``packexp``) or in this process
(``run_command``), for tests of what the command says: a refused value's line and exit code,
``--help``'s text.

``run_command(*args, cwd=...)`` runs the command's own entry point (``packexp.__main__.run``)
with ``sys.argv`` set, the environment ``packexp`` gives a child process (``ENVIRONMENT``),
and stdout and stderr captured, and returns what ``subprocess.run`` would. Whatever
the command changes in the process is put back after: Hydra's global state, the working
directory, the signal handlers, ``sys.unraisablehook``, the environment, logging, and the
command's own per-process records (its job's place, start-up marks, interrupts noted). It saves
a child's start-up (about 5 s, most of it importing TensorFlow). What differs from a child:

- The same Python: what is imported stays imported (TensorFlow too, once a test loads it), so
  a check that something is not yet imported needs a fresh interpreter.
- No new process: no PID of its own, and an interrupt (Ctrl-C, SIGTERM) is raised to the
  caller, not turned into the command's line and exit code 130 or 143.
- No exit of the interpreter: the exit code is ``SystemExit``'s, as Python turns it into one;
  the threads the command leaves are not joined, and its ``atexit`` hooks run when the
  caller's process ends.
- Only Python's streams are captured: what C code writes to file descriptors 1 and 2
  (TensorFlow's banner) is not in ``stdout`` or ``stderr``.
- Call it from the main thread, as the command installs signal handlers.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from unittest import mock

from packexp.testing.config import ROOT

# The environment ``packexp`` gives ``python -m packexp``.
ENVIRONMENT = {"HYDRA_FULL_ERROR": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}


def packexp(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs ``python -m packexp *args`` in a child process, in ``cwd`` (the checkout)."""
    return subprocess.run([sys.executable, "-m", "packexp", *args], cwd=cwd,
                          env={**os.environ, **ENVIRONMENT}, capture_output=True, text=True,
                          timeout=timeout)


@dataclass(frozen=True)
class Result:
    """What the command returned, named as ``subprocess.CompletedProcess`` names it."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run_command(*args: str, cwd: str | Path | None = None) -> Result:
    """Runs ``python -m packexp *args`` in this process.

    Args:
        *args: The command's arguments: overrides, ``-m``, ``--help``.
        cwd: The working directory it runs in (where relative run directories go); this
            process's when None.

    Returns:
        Its exit code and what it wrote on stdout and stderr.
    """
    out, err = io.StringIO(), io.StringIO()
    codes: list[Any] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, ENVIRONMENT))
        from hydra._internal import utils as hydra_utils

        import packexp.__main__ as entry  # here: it sets the environment as it is imported
        from packexp.app import cli

        stack.enter_context(_working_dir(cwd))
        stack.enter_context(_hydra_kept())
        stack.enter_context(_command_records_kept())
        stack.enter_context(_signals_kept())
        stack.enter_context(_logging_kept(out, err))
        stack.enter_context(_fresh_warnings())
        stack.enter_context(mock.patch.object(sys, "argv", [entry.__file__, *args]))
        # The command's end leaves the interpreter (os._exit); here it only gives the code.
        stack.enter_context(mock.patch.object(entry, "end", codes.append))
        for module in (entry, cli):
            stack.enter_context(mock.patch.object(module, "exit_interrupted", _raise))
        # A tracer (coverage, a debugger) would make Hydra raise errors it reports as one line.
        stack.enter_context(mock.patch.object(hydra_utils, "is_under_debugger", lambda: False))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            entry.run()
        except Exception:  # a fault of packexp's: its traceback, as Python prints it
            traceback.print_exc()
            codes.append(1)
        returncode = _exit_status(codes[-1], err)
    return Result(args, returncode, out.getvalue(), err.getvalue())


def _exit_status(code: object, stderr: TextIO) -> int:
    """The exit status Python gives ``SystemExit(code)``: None is 0, an int itself, anything
    else is written on ``stderr`` and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


def _raise(interrupt: KeyboardInterrupt, task: str | None = None) -> None:
    raise interrupt


@contextlib.contextmanager
def _working_dir(cwd: str | Path | None) -> Iterator[None]:
    """In ``cwd`` for the block, and back where it was after (a job may change it too:
    ``hydra.job.chdir=true``)."""
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _hydra_kept() -> Iterator[None]:
    """Hydra as a fresh process has it for the block (not initialised), and its state put
    back after: an initialised Hydra (a test inside ``initialize``), the job's config and
    its runtime (the job's name)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobRuntime

    gh = GlobalHydra.instance()
    outer = gh.hydra if gh.is_initialized() else None
    hydra_cfg = HydraConfig.instance().cfg
    runtime = copy.deepcopy(JobRuntime.instance().conf)
    gh.clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        if outer is not None:
            GlobalHydra.instance().initialize(outer)
        HydraConfig.instance().cfg = hydra_cfg
        JobRuntime.instance().conf = runtime


@contextlib.contextmanager
def _command_records_kept() -> Iterator[None]:
    """The command's per-process records empty for the block, as in a fresh process, and as
    they were after: its job's task and place, its start-up marks, the interrupts it noted.
    The job's start-up counts from the call, as ``packexp.tune``'s does."""
    from packexp import startup
    from packexp.app import interrupts, session
    from packexp.runner import signals

    records = [interrupts.job_task, interrupts.job_place, interrupts._noted_while_closing,
               signals._received, startup._marks]
    saved = [list(r) for r in records]
    for record in records:
        record.clear()
    session.count_next_job_from(time.time())
    try:
        yield
    finally:
        session.count_next_job_from(None)
        for record, before in zip(records, saved, strict=True):
            record[:] = before


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """SIGINT's and SIGTERM's handlers and ``sys.unraisablehook`` as they were, after the
    command installs its own."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook


@contextlib.contextmanager
def _logging_kept(out: io.StringIO, err: io.StringIO) -> Iterator[None]:
    """The loggers there were as they were after the block, and the handlers the command
    gave them closed (Hydra's console and job log file). In the block, the handlers that
    write to this process's stdout or stderr write to ``out`` or ``err``; one made in the
    block that stays writes to the caller's streams after."""
    streams = {id(sys.stdout): out, id(sys.__stdout__): out, id(sys.stderr): err,
               id(sys.__stderr__): err}
    saved = [(logger, logger.level, list(logger.handlers), logger.propagate, logger.disabled)
             for logger in _loggers()]
    raise_exceptions = logging.raiseExceptions
    retargeted = [(h, h.setStream(streams[id(h.stream)])) for h in _stream_handlers()
                  if id(h.stream) in streams]
    try:
        yield
    finally:
        logging.raiseExceptions = raise_exceptions
        for logger, level, handlers, propagate, disabled in saved:
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers, logger.propagate, logger.disabled = handlers, propagate, disabled
            logger.setLevel(level)
        for handler, stream in retargeted:
            handler.setStream(stream)
        callers = {id(out): sys.stdout, id(err): sys.stderr}
        for handler in _stream_handlers():
            if id(handler.stream) in callers:
                handler.setStream(callers[id(handler.stream)])


def _loggers() -> list[logging.Logger]:
    return [logging.root, *(logger for logger in logging.Logger.manager.loggerDict.values()
                            if isinstance(logger, logging.Logger))]


def _stream_handlers() -> list[logging.StreamHandler]:
    """Every stream handler alive, each once: those the loggers hold, and those no logger
    holds that logging still knows (``logging._handlerList``: absl's, which TensorFlow makes).
    Hydra's logging set-up shuts every one of them down, and absl's closes its stream unless
    it is ``sys.stderr`` then: pointed at the capture, the caller's stream stays open."""
    alive = [ref() for ref in list(logging._handlerList)]  # type: ignore[attr-defined]
    handlers = [*(h for logger in _loggers() for h in logger.handlers),
                *(h for h in alive if h is not None)]
    found = {id(h): h for h in handlers if isinstance(h, logging.StreamHandler)
             and not isinstance(getattr(type(h), "stream", None), property)}  # lastResort's
    return list(found.values())


@contextlib.contextmanager
def _fresh_warnings() -> Iterator[None]:
    """Python's warnings as a fresh interpreter shows them, on stderr (pytest records them
    instead), under Python's default filters; the caller's filters after."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                         ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _show_warning
        yield


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))
