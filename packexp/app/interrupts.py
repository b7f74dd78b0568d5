"""Ctrl-C and SIGTERM: the job's cleanup runs, then one line says what is kept and how to resume."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from packexp.runner.replay import Recorded
from packexp.runner.signals import (  # noqa: F401 (the command's names for them)
    Terminated,
    _interrupt,
    _received,
    exit_code,
    held,
    raise_if_interrupted,
    raising_interrupts,
    sigterm_interrupts,
)

# Overrides the resume command sets itself.
RESUME_KEYS = ("resume", "hydra.run.dir")


# The task of the job Hydra runs, once it has begun, and its place (run directory, overrides,
# working directory): an interrupt that reaches the command line after the job, in Hydra's
# own code around it, names that job's run, not "starting". Hydra's config is gone by then
# (``run_job`` resets it as it returns), so the place is kept as the job began.
job_task: list[str] = []
job_place: list[tuple[Path, list[str], Path]] = []


def resume_command(overrides: Sequence[str], run_dir: str, changed: Sequence[str] = ()) -> str:
    """The shell command that resumes the run in ``run_dir`` started with ``overrides``, with
    the ``changed`` overrides (``key=value``) in place of those of their keys."""
    from packexp.config import without_keys

    keys = (*RESUME_KEYS, *(c.split("=", 1)[0] for c in changed))
    return shlex.join(["python", "-m", "packexp", *without_keys(overrides, keys), *changed,
                       "resume=true", f"hydra.run.dir={run_dir}"])


def interrupted_line(task: str, run_dir: Path, overrides: Sequence[str], cwd: Path) -> str:
    """What an interrupted job says: where its run is and, for a search, how to resume it."""
    shown = _shown(run_dir, cwd)
    if task != "tune":
        return (f"packexp: interrupted; task={task} does not resume: run it again (its partial "
                f"outputs are in {shown})")
    recorded = Recorded.read(run_dir)
    if not recorded.started:
        return f"packexp: interrupted before the search began; {shown} holds nothing to resume"
    if recorded.finished:
        return f"packexp: interrupted after the search finished; its results are in {shown}"
    return (f"packexp: interrupted; the run in {shown} is kept: resume it with "
            f"{resume_command(overrides, shown)}")


def job_resume_command(changed: Sequence[str] = ()) -> str | None:
    """The command that resumes the search Hydra is running, if it has journaled a start:
    with its overrides, those ``changed`` (a budget stop's larger budget) in their place."""
    from hydra.core.hydra_config import HydraConfig

    try:
        hydra = HydraConfig.get()
    except ValueError:
        return None
    run_dir, cwd = Path(hydra.runtime.output_dir), Path(hydra.runtime.cwd)
    if not Recorded.there(run_dir):
        return None
    return resume_command(list(hydra.overrides.task), _shown(run_dir, cwd), changed)


def _shown(run_dir: Path, cwd: Path) -> str:
    """The run directory as a line names it: relative to where the command ran, if inside."""
    return str(run_dir.relative_to(cwd) if run_dir.is_relative_to(cwd) else run_dir)


def _job_line(task: str | None) -> str:
    """``interrupted_line`` for the job Hydra runs or ran (its place as it began); the starting
    line before any job."""
    task = task or (job_task[-1] if job_task else None)
    if task is None:
        return "packexp: interrupted while starting; nothing was written"
    return interrupted_line(task, *job_place[-1])


def exit_interrupted(interrupt: KeyboardInterrupt, task: str | None = None) -> NoReturn:
    """Prints the one line for an interrupted job of ``task`` and exits with the signal's code.

    A further Ctrl-C or SIGTERM is ignored while the line is written and then ends the process
    at once, so the atexit hooks cannot print tracebacks. The process leaves without the
    interpreter's teardown (``leave``).
    """
    code = exit_code(interrupt)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    print(_job_line(task), file=sys.stderr, flush=True)
    if main_thread:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: os._exit(code))
    leave(code)


def closing() -> None:
    """From now on a Ctrl-C or SIGTERM is noted and ignored, and a second one ends the process
    at once: the command line's job is over, and what is left is closing (the spare MLflow
    writer, Ray, the log), which no atexit hook should end in a traceback."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _while_closing)


_noted_while_closing: list[int] = []


def _while_closing(signum: int, frame: FrameType | None) -> None:
    if _noted_while_closing:
        os._exit(128 + signum)
    _noted_while_closing.append(signum)


def end(code: int | str | None) -> NoReturn:
    """Ends the command line once its job is over (after ``closing``), with ``code``
    (``SystemExit``'s: None is 0, a string is printed and is 1): the threads are ended as the
    interpreter's exit ends them (a joblib sweep's worker pool among them), then ``leave``,
    without the interpreter's teardown, where TensorFlow's objects are destroyed module by
    module."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # what the interpreter's exit does first: joins non-daemon threads
    leave(code or 0)


def leave(code: int) -> NoReturn:
    """Ends an interrupted process: the atexit hooks run (the MLflow writer's, Ray's, the
    log's), the standard streams are flushed, and ``os._exit`` skips the interpreter's
    teardown, where TensorFlow's objects are destroyed module by module. Interrupted
    part-way, a search once crashed there (SIGSEGV, exit -11 instead of 143, seen once in a CI
    run of the suite); the job's own cleanup has run before this point."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
