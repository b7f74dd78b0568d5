"""A regression's pictures and summary: a log axis past a near-diverged trial (a clipped one
where a log axis cannot take the values, as an R\u00b2's), killed and failed trials told apart,
every regression metric in the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from packexp.records import plots
from packexp.records.figure import clipped_range
from packexp.records.report import print_summary
from packexp.records.search_result import SearchResult

PACK = {"build_s": 0.1, "train_s": 0.5, "epochs": 1, "members": ["a", "b", "c"], "bracket": 0,
        "rung": 0}


def regression_results() -> dict:
    """Three trials of one pack, then ``a`` alone: ``b`` cut by halving, ``c`` nearly
    diverged (a huge MSE) and ``d`` diverged in the second pack."""
    def rung(pack_id: str, mse: float | None, epochs: float = 1) -> dict:
        return {"pack_id": pack_id, "epochs": epochs, "rung": 0, "steps": 10,
                "train_loss": mse, "val_accuracy": None,
                "val_loss": mse, "val_mse": mse, "val_mae": mse and mse ** 0.5,
                "val_r2": mse and 1 - mse}

    def trial(trial_id: str, status: str, *rungs: dict) -> dict:
        return {"trial_id": trial_id, "bracket": 0, "status": status, "rungs": list(rungs),
                "hparams": {"batch_size": 32, "optimizer": "adam"}}

    return {"strategy": "knn", "model": "mlp3", "dataset": "california", "seed": 0,
            "objective": {"metric": "val_mse", "mode": "min"}, "wall_time_s": 2.0,
            "trials": [trial("a", "finished", rung("p0", 0.5), rung("p1", 0.02, 3)),
                       trial("b", "killed", rung("p0", 0.9)),
                       trial("c", "killed", rung("p0", 1.5e18)),
                       trial("d", "failed", rung("p1", None, 3))],
            "packs": [{**PACK, "pack_id": "p0", "elapsed_s": 0.6},
                      {**PACK, "pack_id": "p1", "members": ["a", "d"], "epochs": 3,
                       "elapsed_s": 1.2}]}


def test_a_near_diverged_trial_puts_the_best_so_far_on_a_log_axis(tmp_path: Path):
    ax = plots.best_so_far_figure(SearchResult.from_json(tmp_path, regression_results())).axes[0]
    assert ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    assert low < 0.02 and high > 1.5e18  # the best and the outlier both on the axis
    accuracy = regression_results() | {"objective": {"metric": "val_accuracy", "mode": "max"}}
    for t in accuracy["trials"]:
        for r in t["rungs"]:
            r["val_accuracy"] = 0.5
    ax = plots.best_so_far_figure(SearchResult.from_json(tmp_path, accuracy)).axes[0]
    assert ax.get_yscale() == "linear"


def test_a_near_diverged_r2_clips_the_best_so_far_axis(tmp_path: Path):
    """R\u00b2 of a near-diverged trial is about -1.5e18: no log axis takes it, so the axis
    holds the rest and the outlier is a triangle at its edge, its value in the legend."""
    r2 = regression_results() | {"objective": {"metric": "val_r2", "mode": "max"}}
    ax = plots.best_so_far_figure(SearchResult.from_json(tmp_path, r2)).axes[0]
    assert ax.get_yscale() == "linear"
    low, high = ax.get_ylim()
    assert -1 < low < 0.1 and 0.98 < high < 1.1  # 0.5, 0.1 and the best, 0.98, readable
    off = [c for c in ax.collections if c.get_gid() == "off axis"]
    assert len(off) == 1 and off[0].get_offsets()[0][1] == low
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "off the axis (1): -1.5e+18" in labels


@pytest.mark.parametrize(("values", "kept", "expected"), [
    ([0.5, 0.1, 0.98], [0.5, 0.98], None),  # no outlier
    ([0.5, 0.1, 0.98, -1.5e18], [0.5, 0.98], (0.1 - 0.044, 0.98 + 0.044)),
    ([-3.0, -2.0, -2.5, -1e9], [-2.0], (-3.05, -1.95)),  # all negative: a loss's log-likelihood
    ([1.0, 1.0, 1.0], [1.0], None),
])
def test_clipped_range(values, kept, expected):
    got = clipped_range(values, kept)
    assert got == expected if expected is None else got == pytest.approx(expected)


def test_the_timeline_marks_killed_and_failed_trials_apart(tmp_path: Path):
    fig = plots.timeline_figure(SearchResult.from_json(tmp_path, regression_results()))
    marks = {line.get_gid(): line for line in fig.axes[0].lines if line.get_gid()}
    assert set(marks) == {"killed", "failed"}
    assert list(marks["killed"].get_ydata()) == [1, 2]  # rows b and c
    assert list(marks["failed"].get_ydata()) == [3]
    assert marks["killed"].get_color() != marks["failed"].get_color()
    assert marks["killed"].get_marker() != marks["failed"].get_marker()
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"stopped by the scheduler (killed)", "failed (diverged)"} <= set(labels)
    ends = [t.get_text().strip() for t in fig.axes[0].texts if t.get_color() == "dimgray"]
    assert ends == ["0.5", "0.9", "1.5e+18", "0.02"]  # the MSE, not a missing accuracy


def test_a_regression_summary_shows_mse_mae_and_r2(capsys, tmp_path: Path):
    print_summary(SearchResult.of(tmp_path, regression_results()), None, top_k=3)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "trial" in line)
    assert [c for c in ("val_mse", "val_mae", "val_r2") if c in header] == [
        "val_mse", "val_mae", "val_r2"]
    row = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("a "))
    assert "0.0200" in row and "0.1414" in row and "0.9800" in row
