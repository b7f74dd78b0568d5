"""Interrupts real searches at random moments and checks how each one ends: the loop that shows
a Ctrl-C or SIGTERM never ends in a crash or a traceback.

    python scripts/interrupt_loop.py -n 30              # SIGINT and SIGTERM in turn
    python scripts/interrupt_loop.py -n 30 --busy 1     # with the other core kept busy
    python scripts/interrupt_loop.py -n 15 --at-results # 0-2 s after results.json is written:
                                                        # the end, as the command closes

Each run is ``python -m packexp`` with the cost strategy measuring a fresh calibration and a
fresh MLflow store (so the signal can land while the store makes its tables, during the
calibration, in the search, or at the end), signalled after a delay drawn uniformly from zero
to the unbroken run's own time (or, with ``--at-results``, 0-2 s after results.json appears).
A run passes when it exits 0, 130 or 143, its stderr holds no "Traceback", "Exception ignored"
or "Fatal Python error", and an interrupted run ends with the one line
``packexp: interrupted...``, naming its run once its job has begun. Prints one line per run
(its delay, the phase its log had reached, the exit code) and a count by phase; a failed
run's stderr is kept in ``--out``. Exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ["experiment=quick", "strategy=cost", "scheduler.R=9", "seed=5", "tracking=mlflow"]
BAD = ("Traceback", "Exception ignored", "Fatal Python error", "Segmentation fault")
# The last of these that packexp.log holds names the phase a signal landed in; once
# results.json is written, it is the end.
PHASES = [("device:", "set-up"), ("cost model: calibrating", "calibration"),
          ("bracket", "search")]


def spin() -> None:
    """A core's worth of busy work, until killed."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def command(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "packexp", *SEARCH, f"hydra.run.dir={workdir / 'run'}",
            f"tracking.store_dir={workdir / 'store'}",
            f"strategy.calibration_dir={workdir / 'calibrations'}"]


def phase(workdir: Path) -> str:
    if (workdir / "run" / "results.json").exists():
        return "end"
    log = workdir / "run" / "packexp.log"
    text = log.read_text() if log.exists() else ""
    found = "start-up"
    for needle, name in PHASES:
        if needle in text:
            found = name
    return found


def one(workdir: Path, sig: int | None, delay: float, env: dict,
        at_results: bool = False) -> tuple[int, str, str, float]:
    """Runs one search, signals it after ``delay`` s (counted from the moment results.json
    appears with ``at_results``); returns (exit code, stderr, phase, s)."""
    start = time.monotonic()
    proc = subprocess.Popen(command(workdir), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    landed = "not sent"
    while at_results and proc.poll() is None and not (workdir / "run" / "results.json").exists():
        time.sleep(0.01)
    if sig is not None:
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            landed = phase(workdir)
            proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=600)
    return proc.returncode, stderr, landed, time.monotonic() - start


def verdict(code: int, stderr: str, sig: int | None, landed: str) -> str | None:
    """Why a run failed, or None."""
    if code not in (0, 130, 143):
        return f"exit code {code}"
    if bad := [b for b in BAD if b in stderr]:
        return f"stderr holds {bad}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if code in (130, 143) and not (lines and lines[-1].startswith("packexp: interrupted")):
        return "no 'packexp: interrupted' line last"
    if code in (130, 143) and lines[-1] == "packexp: interrupted":
        return "a bare 'packexp: interrupted' line, naming no run"
    if code != 0 and sig is None:
        return "an unsignalled run failed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=30)
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--seed", type=int, default=0, help="seeds the delays")
    parser.add_argument("--at-results", action="store_true",
                        help="signal 0-2 s after results.json appears (the command closing)")
    parser.add_argument("--out", type=Path, default=Path("outputs/interrupt_loop"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0",
           "PYTHONFAULTHANDLER": "1"}
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    failed, phases = 0, Counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            code, stderr, _, whole = one(Path(tmp) / "whole", None, 0.0, env)
            if verdict(code, stderr, None, "") is not None:
                print(f"the unbroken run failed (exit {code}):\n{stderr[-3000:]}")
                return 1
            print(f"unbroken run: {whole:.1f} s; signals land in 0-{whole:.1f} s", flush=True)
            for i in range(1, args.runs + 1):
                sig = (signal.SIGINT, signal.SIGTERM)[i % 2 == 0]
                delay = rng.uniform(0.0, 2.0 if args.at_results else whole)
                code, stderr, landed, took = one(Path(tmp) / f"run{i}", sig, delay, env,
                                                 args.at_results)
                why = verdict(code, stderr, sig, landed)
                phases[landed] += 1
                line = (f"run {i}: {signal.Signals(sig).name} at {delay:5.1f} s "
                        f"({landed}): exit {code} in {took:.0f} s")
                if why:
                    failed += 1
                    log = args.out / f"run{i}.stderr"
                    log.write_text(stderr)
                    line += f": FAILED, {why} (stderr: {log})"
                print(line, flush=True)
    finally:
        for s in spinners:
            s.kill()
    print(f"{args.runs - failed} of {args.runs} passed with {args.busy} busy process(es); "
          f"signals by phase: {dict(phases)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
