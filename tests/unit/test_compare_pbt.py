"""scripts/compare_pbt.py: its Ray arm's explore is packexp's, its arms' rotation, its table.
Pure: no search runs, no Ray."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from packexp.schedulers.pbt import explore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_pbt.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("compare_pbt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_space_is_table3(script):
    space = script.load_space()
    assert list(space.dims) == ["batch_size", "optimizer", "learning_rate", "activation"]
    assert space.categorical == {"optimizer", "activation"}
    assert space.size == 11 * 4 * 6 * 4


def test_explore_fn_is_packexps_explore(script):
    """The same draws as packexp's explore from a generator of the same seed; keys outside
    the space (the member's seed) ride along; every (given, explored) pair is logged."""
    space = script.load_space()
    donors = [{**t.hparams, "seed": t.seed} for t in space.sample(6, 3, 0)]
    log: list[dict] = []
    explore_fn = script.explorer(space, 3, log)
    rng = np.random.default_rng(3)
    for donor in donors:
        got = explore_fn(dict(donor))
        assert got == explore(donor, space, rng, factors=(0.8, 1.2), resample_probability=0.25)
        assert got["seed"] == donor["seed"]
        assert all(space.dims[k].values.index(got[k]) >= 0 for k in space.dims)
    assert [e["given"] for e in log] == donors


def test_arms_rotate_per_seed(script):
    arms = ["pbt", "asha", "ray"]
    assert [script.order(arms, t) for t in range(4)] == [
        ["pbt", "asha", "ray"], ["asha", "ray", "pbt"], ["ray", "pbt", "asha"],
        ["pbt", "asha", "ray"]]


def test_table(script):
    def run(seed, arm, best, process_s, search_s, programs=None):
        return {"seed": seed, "arm": arm, "best": best, "process_s": process_s,
                "search_s": search_s, "epochs_spent": 64, "programs": programs}

    runs = [run(0, "pbt", 0.6, 10.0, 5.0, 2), run(0, "ray", 0.5, 40.0, 30.0),
            run(1, "pbt", 0.7, 20.0, 6.0, 2), run(1, "ray", 0.6, 30.0, 20.0),
            run(2, "pbt", 0.8, 10.0, 7.0, 2), run(2, "ray", 0.7, 60.0, 40.0)]
    lines = script.table(runs, [0, 1, 2], ["pbt", "ray"]).splitlines()
    assert lines[0] == "| seed | pbt | ray |"
    assert lines[2] == "| 0 | 0.6000 | 0.5000 |"
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in lines[5:]}
    assert rows["mean best"] == ["0.7000", "0.6000 |"]
    assert rows["median process s"] == ["10.00", "40.00 |"]
    assert rows["median search s"] == ["6.00", "30.00 |"]
    assert rows["programs"] == ["2", "- |"]
    # per seed ray/pbt: 4, 1.5, 6 -> median 4
    assert rows["speedup over ray (process s)"] == ["4.00", "1.00 |"]


@pytest.mark.process
def test_help_shows_the_docstring():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "custom_explore_fn" in out.stdout and "--population" in out.stdout
    assert "--out" not in out.stdout
