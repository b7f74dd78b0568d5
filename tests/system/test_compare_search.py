"""scripts/compare_search.py: its summary arithmetic, its one-line errors, and a tiny run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_search.py"
R = 3


def compare(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("compare_search", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def curve(*points: tuple[float, float | None]) -> list[dict]:
    return [{"elapsed_s": t, "epochs": i + 1, "best": b} for i, (t, b) in enumerate(points)]


def test_time_to_random_best_and_gaps_to_optuna(script):
    run = script.Run
    runs = [run("random", 0, 12.0, 10.0, {"val_accuracy": 0.8}, 11, curve((2, None), (6, 0.8))),
            run("random", 1, 12.0, 10.0, {"val_accuracy": 0.6}, 11, curve((3, 0.6))),
            run("tpe", 0, 9.0, 8.0, {"val_accuracy": 0.9}, 11, curve((1, 0.5), (2, 0.9))),
            run("tpe", 1, 9.0, 8.0, {"val_accuracy": 0.5}, 11, curve((4, 0.5))),
            run("optuna", 0, 24.0, 20.0, {"val_accuracy": 0.6}, 12, curve((5, 0.6)), 11.0)]
    summary = script.summarize(runs, ["random", "tpe", "optuna"])
    assert summary["random_best_target"] == pytest.approx(0.7)
    random, tpe, optuna = (summary["arms"][a] for a in ("random", "tpe", "optuna"))
    # random's seed 1 never reaches 0.7: its whole search, 10 s, counts.
    assert random["to_random_best_s_mean"] == pytest.approx(8.0)
    assert random["reached_random_best"] == 1
    assert tpe["to_random_best_fraction"] == pytest.approx((2 + 8) / 2 / 10)
    assert optuna["reached_random_best"] == 0 and optuna["budget_epochs_mean"] == 11.0
    assert tpe["best_minus_optuna"] == pytest.approx(0.1)
    assert tpe["process_vs_optuna"] == pytest.approx(9 / 24)
    assert optuna["best_minus_optuna"] == 0 and optuna["process_vs_optuna"] == 1
    table = script.markdown(summary).splitlines()
    assert len(table) == 2 + 3
    assert table[3].startswith("| tpe | 2 | 0.7000 ± 0.2828 | 0.5000 | 0.9000 |")
    assert "0.50 (1/2 reached)" in table[3]


def test_seeds_run_outside_arms_and_optuna_s_budget_is_random_s_mean_so_far(script, tmp_path,
                                                                           monkeypatch):
    """The loop over seeds, with packexp's and Optuna's children replaced (test_end_to_end
    runs them, at one seed): each seed runs every arm, then Optuna with a budget of random's
    mean epochs over the seeds run so far; the outputs hold every run."""
    calls = []

    def run_packexp(arm, seed, overrides, run_dir):
        calls.append((arm, seed))
        assert f"seed={seed}" in overrides and run_dir.name == f"seed{seed}"
        best = 0.5 + seed / 10
        return script.Run(arm, seed, 2.0, 1.0, {"val_accuracy": best}, 10.0 + seed,
                          curve((0.5, best)))

    def run_optuna(seed, overrides, budget, out):
        calls.append(("optuna", seed, budget))
        return script.Run("optuna", seed, 3.0, 1.5, {"val_accuracy": 0.55}, budget,
                          curve((1.0, 0.55)), budget)

    monkeypatch.setattr(script, "run_packexp", run_packexp)
    monkeypatch.setattr(script, "run_optuna", run_optuna)
    out_dir = tmp_path / "out"
    script.compare(script.parser().parse_args(
        ["--seeds", "0,1", "--arms", "random", "--R", str(R), "--dataset", "digits",
         "--out", str(out_dir)]))
    assert calls == [("random", 0), ("optuna", 0, 10.0), ("random", 1), ("optuna", 1, 10.5)]
    runs = json.loads((out_dir / "runs.json").read_text())
    assert [(r["arm"], r["seed"]) for r in runs] == [(a, s) for s in (0, 1)
                                                      for a in ("random", "optuna")]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["arms"]["random"]["seeds"] == 2
    assert summary["arms"]["optuna"]["budget_epochs_mean"] == pytest.approx(10.25)
    assert (out_dir / "best_so_far.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.process
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arms", "random,nope"], "--arms: unknown arm 'nope'; known arms are random, tpe, "
                                    "asha, asha-tpe"),
        (["--arm", "optuna=sampler=tpe"], "--arm optuna: the name of the reference arm"),
        (["--seeds", "0,x"], "--seeds '0,x': must be integers"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, needle):
    out = compare(*args, "--out", str(tmp_path / "out"))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("compare_search: error: ")
    assert needle in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_failing_child_names_arm_seed_and_command(tmp_path):
    out = compare("--seeds", "3", "--arms", "", "--arm", "broken=sampler=nope", "--no-optuna",
                  "--dataset", "digits", "--out", str(tmp_path / "out"))
    assert out.returncode == 1
    first, *tail = out.stderr.splitlines()
    assert first.startswith("compare_search: arm broken, seed 3 failed (exit ")
    assert "-m packexp tracking=none" in first and "sampler=nope" in first
    assert "nope" in "\n".join(tail)


@pytest.mark.slow
def test_end_to_end(tmp_path):
    out_dir = tmp_path / "out"
    # One seed: the summary's arithmetic over several is test_time_to_random_best_and_gaps_to_
    # optuna's; each seed here costs two children (a TensorFlow start each).
    out = compare("--seeds", "1", "--arms", "random", "--R", str(R), "--dataset",
                  "digits", "--out", str(out_dir))
    assert out.returncode == 0, out.stderr[-3000:]
    runs = json.loads((out_dir / "runs.json").read_text())
    arms = ["random", "optuna"]  # one packexp arm: each child costs a TensorFlow start
    # Seeds outside, arms inside.
    assert [(r["arm"], r["seed"]) for r in runs] == [(a, 1) for a in arms]
    for r in runs:
        assert 0 < r["wall_time_s"] < r["process_s"]
        assert 0 <= r["best"]["val_accuracy"] <= 1
        bests = [p["best"] for p in r["anytime"] if p["best"] is not None]
        assert bests and bests == sorted(bests) and bests[-1] == r["best"]["val_accuracy"]
        assert r["anytime"][-1]["epochs"] == pytest.approx(r["epochs_spent"])
    random_epochs = [r["epochs_spent"] for r in runs if r["arm"] == "random"]
    for r in runs:
        if r["arm"] == "optuna":
            # Budget: random's mean epochs; the last trial started below it runs on.
            assert r["budget_epochs"] == pytest.approx(sum(random_epochs) / len(random_epochs))
            assert r["budget_epochs"] <= r["epochs_spent"] < r["budget_epochs"] + R
    assert (out_dir / "random" / "seed1" / "results.json").is_file()

    summary = json.loads((out_dir / "summary.json").read_text())
    assert list(summary["arms"]) == arms
    for arm, row in summary["arms"].items():
        assert row["seeds"] == 1
        assert row["best_min"] <= row["best_mean"] <= row["best_max"]
        assert 0 < row["wall_time_s_mean"] < row["process_s_mean"]
        assert row["to_random_best_fraction"] > 0 and 0 <= row["reached_random_best"] <= 1
        assert "best_minus_optuna" in row and row["process_vs_optuna"] > 0, arm
    assert summary["arms"]["random"]["reached_random_best"] == 1
    table = (out_dir / "summary.md").read_text()
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [f"| {a}" for a in arms]
    assert table in out.stdout
    assert (out_dir / "best_so_far.png").read_bytes().startswith(b"\x89PNG")
