"""scripts/bench_search.py's arithmetic: the run schedule and the medians over fake results."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_search.py"
spec = importlib.util.spec_from_file_location("bench_search", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_schedule_rotates_strategies_and_alternates_the_trees():
    plan = bench.schedule(["none", "knn", "random"], 3, ["baseline", "current"])
    assert plan == [
        [("baseline", "none"), ("current", "none"), ("baseline", "knn"), ("current", "knn"),
         ("baseline", "random"), ("current", "random")],
        [("current", "knn"), ("baseline", "knn"), ("current", "random"),
         ("baseline", "random"), ("current", "none"), ("baseline", "none")],
        [("baseline", "random"), ("current", "random"), ("baseline", "none"),
         ("current", "none"), ("baseline", "knn"), ("current", "knn")],
    ]
    assert bench.schedule(["none", "knn"], 2) == [[("current", "none"), ("current", "knn")],
                                                  [("current", "knn"), ("current", "none")]]


def fake(wall: float, train: list[float], new: bool = True) -> dict:
    packs = [{"pack_id": f"p{i}", "bracket": 0, "rung": 0, "epochs": 1, "members": [],
              "build_s": 0.5, "train_s": t} for i, t in enumerate(train)]
    if new:
        packs = [{**p, "trace_s": 0.25, "eval_s": 0.1, "checkpoint_s": 0.0, "probe_s": 0.0}
                 for p in packs]
    return {"wall_time_s": wall, "trials": [], "packs": packs,
            **({"startup_s": wall / 10} if new else {}),
            "best": {"trial_id": "b0-t000", "hparams": {}, "val_accuracy": 0.9, "epochs": 1}}


def test_summarize_takes_medians_and_counts_missing_phases_as_zero():
    runs = [(fake(10.0, [1.0, 2.0]), 14.0), (fake(12.0, [1.0, 5.0]), 15.0),
            (fake(20.0, [2.0, 2.0]), 30.0)]
    got = bench.summarize(runs)
    assert (got["wall_time_s"], got["process_s"], got["startup_s"]) == (12.0, 15.0, 1.2)
    assert got["train_share"] == pytest.approx(0.3)  # 3/10, 6/12, 4/20
    assert (got["build_s"], got["trace_s"], got["train_s"], got["eval_s"]) == pytest.approx(
        (1.0, 0.5, 4.0, 0.2))
    assert (got["walls"], got["packs"], got["old_records"]) == ([10.0, 12.0, 20.0], 2, False)
    old = bench.summarize([(fake(10.0, [1.0, 3.0], new=False), 13.0)])
    assert (old["startup_s"], old["trace_s"], old["eval_s"], old["train_share"]) == (
        None, 0.0, 0.0, pytest.approx(0.4))
    assert old["old_records"]


def test_ratios_read_before_over_now():
    assert bench.ratio(12.0, 8.0) == "1.50x"
    assert bench.ratio(None, 8.0) == bench.ratio(12.0, 0.0) == "-"
