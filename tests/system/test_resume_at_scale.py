"""Resume at scale (issue 74, point 4): an ASHA search of 10,000 trials on the fake trainer,
killed with SIGKILL once its 7,000th configuration is drawn, resumes to the unbroken run's
trials and best (``packexp.testing.scale``, each run its own process). The replay's time is
the benchmark's (``scripts/bench_resume.py``), not asserted here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from packexp.testing.config import ROOT
from packexp.testing.processes import wait_until
from packexp.testing.scale import drawn

pytestmark = pytest.mark.slow

N, KILL_AT = 10_000, 7_000


def scale(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "packexp.testing.scale", str(run_dir),
                             str(N)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_search_of_ten_thousand_killed_at_seven_thousand_resumes_to_the_unbroken_one(
        tmp_path):
    unbroken = finished(scale(tmp_path / "unbroken"))
    assert len(unbroken["outcome"]) == N and unbroken["resumed"] == 0
    killed = scale(tmp_path / "killed")
    wait_until(lambda: drawn(tmp_path / "killed", f"t{KILL_AT:04d}") or killed.poll() is not None,
               timeout_s=900, every_s=0.1)
    assert killed.poll() is None, "the search ended before it could be killed"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    records = (tmp_path / "killed" / "journal.jsonl").read_text().splitlines()
    assert not any('"finished"' in r for r in records)
    resumed = finished(scale(tmp_path / "killed"))
    assert resumed["resumed"] > KILL_AT // 2  # thousands of results read back, not trained
    assert resumed["outcome"] == unbroken["outcome"]
    assert resumed["best"] == unbroken["best"]
