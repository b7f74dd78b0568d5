"""What a process imports (a fresh interpreter each): a search on a trainer without TensorFlow
loads neither TensorFlow nor Keras, through the config as through ``packexp.tune``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from packexp.testing.config import ROOT

FAKE_SEARCH = """
import os, sys
os.environ["PACKEXP_HOME"] = sys.argv[1]
import packexp
from packexp.testing import FakeTrainer
result = packexp.tune("mlp3", "digits", trainer=FakeTrainer(), strategy="knn", tracking="none",
                      run_dir=sys.argv[1] + "/run", overrides=["scheduler.R=9"])
assert result.best is not None
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")))
"""


@pytest.mark.process
def test_a_fake_search_through_the_config_imports_neither_tensorflow_nor_keras(tmp_path):
    # The config's checks (preprocessing, ${default:} values read from source) need neither.
    done = subprocess.run([sys.executable, "-c", FAKE_SEARCH, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


COMMAND = """
import atexit, sys
atexit.register(lambda: print("loaded:", sorted(
    m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))))
sys.argv = ["packexp", *sys.argv[1:]]
from packexp.__main__ import run
run()
"""


@pytest.mark.process
def test_a_simulated_cluster_from_the_command_line_starts_no_tensorflow(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, "executor=simulated", "strategy=knn", "tracking=none",
         "scheduler.R=9", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "results.json").is_file()
    assert done.stdout.strip().splitlines()[-1] == "loaded: []", done.stdout[-2000:]
