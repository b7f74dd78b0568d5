"""A Pareto search's records carry every goal: the trials table, MLflow's trial runs, the
summary's pointer to its picture, and the picture's labels of trials at one point."""

from __future__ import annotations

from pathlib import Path

from packexp.events import MemberScored, PackRecord, RungResult
from packexp.records import plots
from packexp.records.report import print_summary
from packexp.records.search_result import SearchResult
from packexp.space import Trial
from packexp.tracking.mlflow_tracker import MlflowTracker

GOALS = {"metrics": [{"name": "val_accuracy", "mode": "max"}, {"name": "params", "mode": "min"}]}


def pareto_results() -> dict:
    """Four trials of one pack: ``a`` and ``b`` the same point on the front, ``c`` on it too,
    ``d`` dominated by ``c``."""
    def trial(trial_id: str, accuracy: float, params: int) -> dict:
        return {"trial_id": trial_id, "bracket": 0, "status": "finished",
                "hparams": {"batch_size": 32, "width": params // 10},
                "rungs": [{"pack_id": "p0", "epochs": 1, "rung": 0, "steps": 10,
                           "val_accuracy": accuracy, "val_loss": 1 - accuracy,
                           "train_loss": 1 - accuracy, "params": params}]}

    trials = [trial("a", 0.5, 754), trial("b", 0.5, 754), trial("c", 0.9, 42634),
              trial("d", 0.8, 150794)]
    front = [{"trial_id": t["trial_id"], "hparams": t["hparams"], "epochs": 1,
              "val_accuracy": t["rungs"][0]["val_accuracy"], "params": t["rungs"][0]["params"]}
             for t in trials[:3]]
    return {"strategy": "knn", "model": "mlp3", "dataset": "digits", "seed": 0,
            "objective": GOALS, "wall_time_s": 2.0, "trials": trials, "pareto_front": front,
            "best": {"trial_id": "c", "hparams": trials[2]["hparams"], "val_accuracy": 0.9,
                     "epochs": 1, "metric": "val_accuracy", "value": 0.9},
            "packs": [{"pack_id": "p0", "build_s": 0.1, "train_s": 0.5, "epochs": 1,
                       "members": ["a", "b", "c", "d"], "bracket": 0, "rung": 0,
                       "elapsed_s": 0.6}]}


def test_the_trials_table_has_every_goals_column():
    table = SearchResult.of("run", pareto_results()).trials
    assert list(table.columns[:11]) == ["trial_id", "bracket", "status", "rung", "epochs",
                                        "steps", "val_accuracy", "val_loss", "train_loss",
                                        "params", "pack_id"]
    assert table.set_index("trial_id")["params"].to_dict() == {
        "a": 754, "b": 754, "c": 42634, "d": 150794}
    single = {**pareto_results(), "objective": {"metric": "val_accuracy", "mode": "max"}}
    assert "params" not in SearchResult.of("run", single).trials.columns


def test_mlflow_trial_runs_log_the_parameter_count(tmp_path, monkeypatch):
    tracker = MlflowTracker(store_dir=str(tmp_path))  # no run started: no writer process
    logged = {}
    monkeypatch.setattr(tracker, "log_trial_rung",
                        lambda trial_id, hparams, tags, epochs, metrics:
                        logged.update({trial_id: metrics}))
    pack = PackRecord("p0", 0, 0, 1.0, ["a"])
    result = RungResult("a", 0, 0, 1.0, 10, 0.5, 0.5, 0.5, "p0", None, params=754)
    tracker.on_member_scored(MemberScored(result, Trial("a", {"batch_size": 32}, ()), pack))
    assert logged["a"]["params"] == 754 and logged["a"]["val_accuracy"] == 0.5


def test_the_summary_names_the_pareto_pictures_real_file(capsys, tmp_path: Path):
    print_summary(SearchResult.of(tmp_path, pareto_results()), None, top_k=3)
    out = "".join(capsys.readouterr().out.split())  # rich may wrap a long path
    assert f"(3trials,{tmp_path.resolve() / 'pareto.png'})" in out
    assert "plots/pareto.png" not in out


def test_trials_at_one_point_share_one_label(tmp_path: Path):
    fig = plots.pareto_figure(SearchResult.from_json(tmp_path, pareto_results()))
    labels = sorted(t.get_text() for t in fig.axes[0].texts)
    assert labels == ["a, b", "c"]
    assert plots.same_points([("a", 1.0, 2.0), ("b", 1.0, 2.0), ("c", 1.0, 3.0)]) == {
        (1.0, 2.0): ["a", "b"], (1.0, 3.0): ["c"]}
