"""Ctrl-C and SIGTERM: one line naming the resume command, the signal's exit code, and a run
that resumes to the scores of an unbroken one; so does a SIGKILLed run."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from packexp.app.interrupts import Terminated, interrupted_line, resume_command, sigterm_interrupts
from packexp.runner import Replayed
from packexp.runner.journal import Journal
from packexp.testing.command import packexp
from packexp.testing.config import ROOT
from packexp.testing.searches import kept_models, search, search_command

# Fused packs (experiment=quick trains plain ones): the end-to-end checks of killed and
# resumed runs cover the fused engine's journal, checkpoints and resume too, and the slower
# fused search leaves the signals time to land mid-run.
SEARCH = ["experiment=quick", "strategy=knn", "scheduler.R=9", "seed=5", "pack.fusion=auto"]
RESUME = ": resume it with "


# ``python -m packexp`` with one function (module, attribute: a class's method as
# ``Class.method``) made to send the signal to its own process as it is called: the signal
# lands there however late a loaded machine would let a watching test send it.
SIGNALLED_AT = """
import functools, importlib, os, runpy, sys
module, name, sig = sys.argv[1], sys.argv[2], int(sys.argv[3])
*path, attribute = name.split(".")
owner = importlib.import_module(module)
for part in path:
    owner = getattr(owner, part)
real = getattr(owner, attribute)

@functools.wraps(real)
def signalled(*args, **kwargs):
    os.kill(os.getpid(), sig)
    return real(*args, **kwargs)

setattr(owner, attribute, signalled)
sys.argv = [sys.argv[0], *sys.argv[4:]]
runpy.run_module("packexp", run_name="__main__", alter_sys=True)
"""


def interrupt(sig: int, *args: str, journal: Path | None = None,
              when: Callable[[int], bool] | None = None,
              at: tuple[str, str] | None = None) -> tuple[int, list[str], str]:
    """Runs ``python -m packexp *args``, sends ``sig`` once ``journal`` holds a finished pack
    (or ``when(pid)`` holds; or, with ``at``, the process sends it to itself as that
    function is called: ``SIGNALLED_AT``), and returns the exit code, stderr's non-empty
    lines and stderr. A crash prints every thread's stack (``PYTHONFAULTHANDLER``)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0",
           "PYTHONFAULTHANDLER": "1"}
    if at is not None:  # (``-c`` imports packexp from the working directory, ROOT)
        proc = subprocess.Popen([sys.executable, "-c", SIGNALLED_AT, *at, str(int(sig)), *args],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return proc.returncode, [line for line in stderr.splitlines() if line.strip()], stderr
    proc = subprocess.Popen([sys.executable, "-m", "packexp", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if when is None:
        def when(pid: int) -> bool:
            return journal.exists() and '"event": "pack"' in journal.read_text()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if when(proc.pid):
            break
        time.sleep(0.002)
    assert proc.poll() is None, "the run ended before the signal"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    return proc.returncode, [line for line in stderr.splitlines() if line.strip()], stderr


def resume(line: str) -> subprocess.CompletedProcess:
    """Runs the command the interrupted run's line names."""
    argv = shlex.split(line.split(RESUME, 1)[1])
    assert argv[:3] == ["python", "-m", "packexp"]
    return packexp(*argv[3:])


def resume_here(line: str) -> dict:
    """Resumes, in this process (run(cfg)), the run the interrupted run's line names, with the
    overrides it names; returns its results. (test_ctrl_c_prints_the_resume_command... runs
    the command itself, as typed.)"""
    argv = shlex.split(line.split(RESUME, 1)[1])
    assert argv[:3] == ["python", "-m", "packexp"]
    return search_command(argv[3:])


def scores(run_dir: Path) -> dict:
    """Every trial's rung scores, and the models the run kept (the same weights, exactly)."""
    results = json.loads((run_dir / "results.json").read_text())
    return {**{t["trial_id"]: [(r["rung"], r["val_accuracy"]) for r in t["rungs"]]
               for t in results["trials"]}, "kept models": kept_models(run_dir)}


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> dict:
    """The scores of SEARCH run whole (in this process, as run(cfg)), which every resumed run
    of it must end with."""
    run_dir = tmp_path_factory.mktemp("whole") / "run"
    packs = search(run_dir, *SEARCH)["packs"]
    assert any(p["fused"] for p in packs)  # SEARCH's fused engine, as its comment says
    whole = scores(run_dir)
    assert whole["kept models"], "the best model is kept by default"
    return whole


def expected_line(run_dir: Path, *args: str) -> str:
    return (f"packexp: interrupted; the run in {run_dir} is kept{RESUME}"
            + shlex.join(["python", "-m", "packexp", *args, "resume=true",
                          f"hydra.run.dir={run_dir}"]))


@pytest.mark.slow
def test_ctrl_c_prints_the_resume_command_and_the_resumed_run_ends_as_an_unbroken_one(
        tmp_path, unbroken):
    run_dir = tmp_path / "run"
    code, lines, stderr = interrupt(signal.SIGINT, *SEARCH, f"hydra.run.dir={run_dir}",
                                    journal=run_dir / "journal.jsonl")
    assert code == 130, stderr[-3000:]
    assert lines == [expected_line(run_dir, *SEARCH)]
    assert not (run_dir / "results.json").exists()

    resumed = resume(lines[0])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert scores(run_dir) == unbroken


def replayed(run_dir: Path) -> int:
    """The member results a resume of ``run_dir`` replays, as its journal stands."""
    return Replayed.of(Journal(run_dir).read()).members


@pytest.mark.slow
def test_kill_9_mid_run_then_resume(tmp_path, unbroken, caplog):
    """A SIGKILLed search resumes from its journal (in this process) and ends as an
    uninterrupted one."""
    run_dir = tmp_path / "killed"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "packexp", *SEARCH,
                             f"hydra.run.dir={run_dir}"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    journal = run_dir / "journal.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and replayed(run_dir) >= 6:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "results.json").exists()
    # What a resume replays: the results of packs journaled whole. A kill that lands between
    # a pack's member results and its pack record leaves results the pack trains again (the
    # count of result lines alone made this test fail once in a suite run).
    done = replayed(run_dir)
    assert done >= 6

    with caplog.at_level(logging.INFO, logger="packexp"):
        search(run_dir, *SEARCH, "resume=true")
    assert f"resuming: {done} member results" in caplog.text
    assert scores(run_dir) == unbroken


@pytest.mark.slow
def test_sigterm_ends_the_mlflow_runs_killed_and_resume_finishes_them(tmp_path):
    from mlflow.tracking import MlflowClient

    args = [*SEARCH, "tracking=mlflow", f"tracking.store_dir={tmp_path}"]
    run_dir = tmp_path / "run"
    code, lines, stderr = interrupt(signal.SIGTERM, *args, f"hydra.run.dir={run_dir}",
                                    journal=run_dir / "journal.jsonl")
    assert code == 143, stderr[-3000:]
    *store, line = lines  # a new store announces its tables
    assert line == expected_line(run_dir, *args)
    assert all(" INFO mlflow." in s for s in store) and "Traceback" not in stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("packexp").experiment_id

    def statuses() -> tuple[list[str], set[str]]:
        runs = client.search_runs([experiment])
        return ([r.info.status for r in runs if "mlflow.parentRunId" not in r.data.tags],
                {r.info.status for r in runs if "mlflow.parentRunId" in r.data.tags})

    parents, trials = statuses()
    assert parents == ["KILLED"]
    assert "RUNNING" not in trials

    resume_here(line)
    parents, trials = statuses()
    assert parents == ["FINISHED"]
    assert "RUNNING" not in trials


def loaded(library: str) -> Callable[[int], bool]:
    """Whether a process has mapped a shared library whose name holds ``library``."""
    def check(pid: int) -> bool:
        try:
            return library in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return False
    return check


@pytest.mark.slow
def test_ctrl_c_while_hydra_imports_is_one_line_and_leaves_nothing_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    # PyYAML's C loader maps as Hydra starts importing: seconds before the search begins.
    code, lines, stderr = interrupt(signal.SIGINT, *SEARCH, f"hydra.run.dir={run_dir}",
                                    when=loaded("_yaml"))
    assert code == 130, stderr[-3000:]
    assert lines in (["packexp: interrupted while starting; nothing was written"],
                     [f"packexp: interrupted before the search began; {run_dir} holds nothing "
                      "to resume"]), lines
    assert not (run_dir / "journal.jsonl").exists()


@pytest.mark.slow
def test_ctrl_c_during_calibration_resumes_to_the_plan_of_the_calibration_it_measured(
        tmp_path):
    run_dir, kept = tmp_path / "run", tmp_path / "kept"
    args = [*SEARCH[:1], *SEARCH[2:4], "strategy=cost", "pack.fusion=off",
            f"strategy.calibration_dir={kept}"]
    code, lines, stderr = interrupt(signal.SIGINT, *args, f"hydra.run.dir={run_dir}",
                                    at=("packexp.strategies.calibration", "load_or_calibrate"))
    assert code == 130, stderr[-3000:]
    assert lines == [expected_line(run_dir, *args)]
    assert not (run_dir / "calibration.json").exists() and not list(kept.glob("*.json"))
    measured = resume_here(lines[0])["calibration"]
    assert measured["source"] == "measured"
    # The plan is the config's, the seed's and the calibration's: an unbroken run pinned to
    # the calibration the resume measured ends as the resumed one.
    pinned = tmp_path / "pinned"  # in this process
    search(pinned, *args, f"strategy.calibration={run_dir / 'calibration.json'}")
    assert scores(pinned) == scores(run_dir)


@pytest.mark.slow
def test_ctrl_c_while_the_plots_are_drawn_keeps_the_finished_results(tmp_path, unbroken):
    run_dir = tmp_path / "run"
    code, lines, stderr = interrupt(signal.SIGINT, *SEARCH, f"hydra.run.dir={run_dir}",
                                    at=("packexp.records.plots", "write_plots"))
    assert code == 130, stderr[-3000:]
    assert lines == [f"packexp: interrupted after the search finished; its results are in "
                     f"{run_dir}"]
    assert scores(run_dir) == unbroken
    refused = packexp(*SEARCH, "resume=true", f"hydra.run.dir={run_dir}")
    assert refused.returncode == 2 and "has finished already" in refused.stderr


@pytest.mark.slow
def test_ctrl_c_stops_a_multirun_sweep(tmp_path):
    code, lines, stderr = interrupt(
        signal.SIGINT, "-m", "strategy=knn,none", *SEARCH[:1], *SEARCH[2:],
        f"hydra.sweep.dir={tmp_path}", journal=tmp_path / "0" / "journal.jsonl")
    assert code == 130, stderr[-3000:]
    assert lines == [expected_line(tmp_path / "0", "strategy=knn", *SEARCH[:1], *SEARCH[2:])]
    assert not (tmp_path / "1").exists()


def test_the_resume_command_quotes_for_the_shell_and_sets_resume_and_the_run_dir():
    overrides = ["strategy=knn", "resume=true", "+search_space.params.width=[32,64]",
                 "tracking.experiment=my runs", "~summary_top_k", "hydra.run.dir=elsewhere"]
    assert resume_command(overrides, "outputs/runs/X") == (
        "python -m packexp strategy=knn '+search_space.params.width=[32,64]' "
        "'tracking.experiment=my runs' '~summary_top_k' resume=true "
        "hydra.run.dir=outputs/runs/X")


def test_the_line_says_what_is_kept(tmp_path):
    run_dir = tmp_path / "runs" / "X"
    run_dir.mkdir(parents=True)
    assert interrupted_line("tune", run_dir, [], tmp_path) == (
        "packexp: interrupted before the search began; runs/X holds nothing to resume")
    assert interrupted_line("profile", run_dir, [], tmp_path) == (
        "packexp: interrupted; task=profile does not resume: run it again (its partial "
        "outputs are in runs/X)")
    Journal(run_dir).append("start", config={}, overrides=[])
    assert interrupted_line("tune", run_dir, ["seed=1"], tmp_path / "elsewhere") == (
        f"packexp: interrupted; the run in {run_dir} is kept: resume it with "
        f"python -m packexp seed=1 resume=true hydra.run.dir={run_dir}")
    Journal(run_dir).append("finished", wall_time_s=1.0)
    assert interrupted_line("tune", run_dir, [], tmp_path) == (
        "packexp: interrupted after the search finished; its results are in runs/X")


def test_an_interrupt_after_hydras_job_returned_names_the_jobs_run(tmp_path, monkeypatch):
    """Hydra resets its config as its job returns; a Ctrl-C landing there, before the command
    line closes, still names the run the job wrote (a suite run once printed a bare
    'packexp: interrupted' in test_ctrl_c_while_the_plots_are_drawn_keeps_the_finished_results
    when the signal came late)."""
    from hydra.core.hydra_config import HydraConfig

    from packexp.app import interrupts

    run_dir = tmp_path / "runs" / "X"
    run_dir.mkdir(parents=True)
    Journal(run_dir).append("start", config={}, overrides=[])
    Journal(run_dir).append("finished", wall_time_s=1.0)
    monkeypatch.setattr(interrupts, "job_task", ["tune"])
    monkeypatch.setattr(interrupts, "job_place", [(run_dir, ["seed=1"], tmp_path)])
    with pytest.raises(ValueError):
        HydraConfig.get()  # as after Hydra's run_job
    assert interrupts._job_line(None) == (
        "packexp: interrupted after the search finished; its results are in runs/X")


def test_sigterm_raises_a_keyboard_interrupt_only_inside_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at the next bytecode; this is never reached in full
    assert signal.getsignal(signal.SIGTERM) is before
    assert issubclass(Terminated, KeyboardInterrupt)


def test_an_interrupt_a_finalizer_swallowed_is_raised_at_the_next_dispatch(monkeypatch):
    """Python runs a signal's handler at the next bytecode, which may be in a finalizer (a
    TensorFlow object's ``__del__``): the KeyboardInterrupt raised there is printed as
    "Exception ignored" and dropped. The driver raises it again before its next pack."""
    from packexp.app import interrupts

    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))

    class Interrupted:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the finalizer runs
            for _ in range(1000):  # bytecodes, at one of which the handler raises
                pass

    previous = signal.signal(signal.SIGINT, interrupts._interrupt)
    interrupts._received.clear()
    try:
        obj = Interrupted()
        del obj  # no KeyboardInterrupt here: it was swallowed
        assert swallowed == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_interrupted()
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts._received.clear()
    interrupts.raise_if_interrupted()  # nothing pending: nothing raised


def test_an_interrupt_inside_a_held_block_is_raised_when_the_block_ends():
    """results.json and the journal's finished record are written under ``held``: a Ctrl-C
    between the two would leave a finished search that resumes."""
    from packexp.app import interrupts

    previous = signal.signal(signal.SIGINT, interrupts._interrupt)
    interrupts._received.clear()
    done = []
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # bytecodes, at one of which the handler runs
                pass
            done.append("both steps")
        assert done == ["both steps"]
        with pytest.raises(KeyboardInterrupt):  # outside a held block it raises at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts._received.clear()
