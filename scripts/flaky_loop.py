"""Runs one test many times while another process keeps a core busy: the loop a flaky place's
test must pass before its fix is believed.

    python scripts/flaky_loop.py \
        tests/system/test_interrupt.py::test_kill_9_mid_run_then_resume -n 20

Each run is a fresh ``pytest`` process (so a crash of the run under test cannot end the loop),
with ``PYTHONFAULTHANDLER=1`` so a crashing subprocess prints every thread's stack. Prints one
line per run and a count at the end; a failed run's output is kept in ``--out``. Exits 1 if any
run failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spin() -> None:
    """A core's worth of busy work, until killed."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test", help="a pytest node id")
    parser.add_argument("-n", "--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the test")
    parser.add_argument("--out", type=Path, default=Path("outputs/flaky_loop"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    passed = 0
    try:
        for i in range(1, args.runs + 1):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                   "no:cacheprovider", args.test], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
            took = time.perf_counter() - start
            ok = done.returncode == 0
            passed += ok
            if not ok:
                log = args.out / f"run{i}.log"
                log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
            print(f"run {i}: {'passed' if ok else 'FAILED'} in {took:.0f} s"
                  + ("" if ok else f" (output: {log})"), flush=True)
    finally:
        for s in spinners:
            s.kill()
    print(f"{passed} of {args.runs} passed with {args.busy} busy process(es): {args.test}")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
