"""Resume at scale: an ASHA search of N trials on the fake trainer (``packexp.testing.scale``),
killed with SIGKILL once its K-th configuration is drawn, then resumed; the replay's time and
whether the resumed run ends as the unbroken one does.

Usage: python scripts/bench_resume.py [--n 10000] [--kill-at 7000]

Each run is its own process. It prints the unbroken run's seconds, the journal's size at the
kill, the resume's results read back, its replay (from its start to its first pack sent: the
journal read, checked and told to the policy again), its whole time, and whether its trials
and best equal the unbroken run's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packexp.testing.scale import drawn

ROOT = Path(__file__).resolve().parents[1]


def start(run_dir: Path, n: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "packexp.testing.scale", str(run_dir), str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode:
        raise SystemExit(err[-2000:])
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--kill-at", type=int, default=7_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as scratch:
        root = Path(scratch)
        unbroken = finished(start(root / "unbroken", args.n))
        killed = start(root / "killed", args.n)
        journal = root / "killed" / "journal.jsonl"
        while killed.poll() is None and not drawn(root / "killed", f"t{args.kill_at:04d}"):
            time.sleep(0.05)
        if killed.poll() is not None:
            raise SystemExit("the search ended before it could be killed")
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        size = journal.stat().st_size
        resumed = finished(start(root / "killed", args.n))
        print(f"command: python scripts/bench_resume.py --n {args.n} --kill-at {args.kill_at}")
        print(f"unbroken: {len(unbroken['outcome'])} trials in {unbroken['seconds']:.1f} s")
        print(f"killed (SIGKILL) once t{args.kill_at:04d} was drawn: journal "
              f"{size / 2**20:.1f} MB")
        print(f"resume: {resumed['resumed']} results read back, replay {resumed['replay_s']:.2f} s"
              f" (to its first pack), {resumed['seconds']:.1f} s in all")
        same = (resumed["outcome"] == unbroken["outcome"]
                and resumed["best"] == unbroken["best"])
        print(f"equal to the unbroken run (every trial's status and rungs, the best): {same}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
