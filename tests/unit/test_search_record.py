"""The typed record (``records/record.py``, ``records/search_result.py``): every run kind's
results.json read back into frozen, typed records and written out again unchanged, an older
release's results.json loaded, and the records' own rules. On the fake trainer through the
config: nothing loads TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from packexp.objectives import ACCURACY
from packexp.records.best import Best, FrontPoint
from packexp.records.record import Exploited, PackRecord, RungResult, Status, TrialRecord
from packexp.records.report import print_summary
from packexp.records.search_result import SearchFacts, SearchResult
from packexp.runner.study import load
from packexp.testing.searches import search_on_fake

KINDS = {
    "hyperband": (),
    "asha": ("scheduler=asha", "scheduler.num_configs=12", "scheduler.max_epochs=40"),
    "pbt": ("scheduler=pbt",),
    "pareto": ("objective=pareto", "objective.metrics.1.name=val_loss"),
    "budget-stopped": ("+budget.trials=12",),
}


@pytest.fixture(params=list(KINDS))
def run(request, tmp_path):
    """A finished (or budget-stopped) search of each kind on the fake trainer: its run
    directory and the results.json it wrote."""
    results = search_on_fake(tmp_path, "tracking=none", *KINDS[request.param])
    return request.param, tmp_path, results


def test_every_run_kind_reads_back_typed_and_writes_the_same_results_json(run):
    kind, run_dir, results = run
    result = load(run_dir)
    assert result.to_json() == results
    assert list(result.to_json()) == list(results)  # the file's keys in the file's order
    assert json.dumps(result.to_json()) == json.dumps(results)
    assert all(isinstance(t, TrialRecord) and isinstance(t.status, Status)
               and isinstance(t.rungs, tuple) for t in result.trial_records)
    assert all(isinstance(p, PackRecord) for p in result.pack_records)
    assert [t.trial_id for t in result.trial_records] == [t["trial_id"]
                                                          for t in results["trials"]]
    assert isinstance(result.best, Best) and result.best.value == results["best"]["value"]
    assert result.best["hparams"] == results["best"]["hparams"]  # reads as its JSON too
    assert isinstance(result.facts, SearchFacts) and result.facts.seed == results["seed"]
    assert result.totals.phases == results["phases"]
    assert result.metrics()["best_value"] == results["best"]["value"]
    if kind == "pbt":
        lineage = [e for t in result.trial_records for e in t.lineage]
        assert lineage and all(isinstance(e, Exploited) for e in lineage)
        assert result.best.schedule == results["best"]["schedule"]
    if kind == "pareto":
        assert result.front and all(isinstance(e, FrontPoint) for e in result.front)
        assert [e.to_dict() for e in result.best_trials] == results["pareto_front"]
    else:
        assert result.front is None and "pareto_front" not in results
    if kind == "budget-stopped":
        assert result.stopped == results["stopped"] and "budget.trials=12" in result.stopped
    else:
        assert result.stopped is None


def test_a_resumed_run_reads_back_with_its_sessions(tmp_path):
    search_on_fake(tmp_path, "tracking=none", "+budget.trials=12")
    results = search_on_fake(tmp_path, "tracking=none", "+budget.trials=30", "resume=true")
    result = load(tmp_path)
    assert result.facts.resumed is True and result.to_json() == results
    assert {p.session for p in result.pack_records} == {0, 1}


def test_a_regression_result_reads_back_with_its_metrics(tmp_path):
    trials = [{"trial_id": "t0", "hparams": {"lr": 0.1}, "bracket": 0, "status": "finished",
               "rungs": [{"rung": 0, "epochs": 1, "steps": 3, "val_accuracy": None,
                          "val_loss": 0.5, "train_loss": 0.6, "pack_id": "b0-r0-p0",
                          "checkpoint": None, "val_mse": 0.5, "val_mae": 0.4,
                          "val_r2": 0.7}], "packs": ["b0-r0-p0"]}]
    results = {"objective": {"metric": "val_mse", "mode": "min"}, "wall_time_s": 1.0,
               "trials": trials, "packs": [PackRecord("b0-r0-p0", 0, 0, 1, ["t0"]).to_dict()],
               "best": Best("t0", {"lr": 0.1}, None, 1, None, "val_mse", 0.5).to_dict(),
               "models": {}}
    result = SearchResult.from_json(tmp_path, results)
    [rung] = result.trial_records[0].rungs
    assert (rung.val_mse, rung.val_mae, rung.val_r2) == (0.5, 0.4, 0.7)
    assert result.tuned_for.regression and result.best_value == 0.5
    assert list(result.trials.columns[:9]) == ["trial_id", "bracket", "status", "rung", "epochs",
                                               "steps", "val_accuracy", "val_loss", "val_mse"]
    assert result.to_json()["trials"] == trials


# An early release's results.json: no objective, phases, totals or anytime; a best without
# metric or value; packs and rungs with fewer fields; a key this release does not know.
OLD_RESULTS = {
    "strategy": "knn", "model": "mlp3", "dataset": "digits", "seed": 0, "R": 9, "eta": 3,
    "wall_time_s": 12.5, "packed_with": "an old key",
    "trials": [{"trial_id": "b0-t000", "hparams": {"batch_size": 32, "learning_rate": 0.01},
                "bracket": 0, "status": "finished",
                "rungs": [{"rung": 0, "epochs": 1, "steps": 40, "val_accuracy": 0.81,
                           "val_loss": 0.6, "train_loss": 0.7, "pack_id": "b0-r0-p0"}]},
               {"trial_id": "b0-t001", "hparams": {"batch_size": 64, "learning_rate": 0.1},
                "bracket": 0, "status": "killed", "rungs": []}],
    "packs": [{"pack_id": "b0-r0-p0", "bracket": 0, "rung": 0, "epochs": 1,
               "members": ["b0-t000"], "steps": 40, "train_s": 2.0, "duration_s": 3.0}],
    "best": {"trial_id": "b0-t000", "hparams": {"batch_size": 32, "learning_rate": 0.01},
             "val_accuracy": 0.81, "epochs": 1},
}


def test_an_older_release_s_results_json_loads(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps(OLD_RESULTS))
    result = load(tmp_path)
    assert result.tuned_for == ACCURACY and result.best_value == 0.81
    assert result.best.metric == "val_accuracy" and result.best_params["batch_size"] == 32
    assert result.trial_records[1].status is Status.KILLED
    assert result.trial_records[0].rungs[0].checkpoint is None  # what it lacked: the default
    assert result.facts.extra == {"packed_with": "an old key"}  # kept, not lost
    assert result.to_json()["packed_with"] == "an old key"
    assert len(result.trials) == 2 and math.isnan(result.trials["val_accuracy"][1])
    assert result.metrics()["wall_time_s"] == 12.5
    print_summary(result, None, top_k=3)
    assert "b0-t000" in capsys.readouterr().out


def test_over_stand_ins_the_summary_ranks_the_full_width_trials_first(tmp_path, capsys):
    """The stand-in scores better than its full-width run, yet the table's first row is the
    full-width trial (the search's best), and the stand-in's scale cell reads the search's."""
    rung = {"rung": 0, "epochs": 3, "steps": 40, "val_loss": 0.6, "train_loss": 0.7,
            "pack_id": "b0-r0-p0"}
    results = {**OLD_RESULTS, "surrogate": {"scale": 4, "transfer": 1},
               "trials": [{"trial_id": "b0-t000", "hparams": {"learning_rate": 0.01},
                           "bracket": 0, "status": "finished",
                           "rungs": [{**rung, "val_accuracy": 0.9}]},
                          {"trial_id": "full-b0-t000",
                           "hparams": {"learning_rate": 0.01, "surrogate_scale": 1},
                           "bracket": 0, "status": "finished",
                           "rungs": [{**rung, "val_accuracy": 0.8}]}]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    print_summary(load(tmp_path), None, top_k=2)
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines()
            if "b0-t000" in line and "│" in line]
    assert [row[1] for row in rows] == ["full-b0-t000", "b0-t000"]
    scale = rows[0].index("1")  # the scale column: 1 at full width, the search's 4 else
    assert rows[1][scale] == "4"
    assert "b0-t000 0.9000 -> 0.8000" in out.replace("\n", " ")  # the transfer line


def test_the_records_are_frozen_and_the_study_keeps_the_newest():
    trial = TrialRecord("t0", {"x": 1}, 0)
    result = RungResult("t0", 0, 0, 1.0, 3, 0.5, 0.4, 0.3, "p0", None)
    scored = trial.scored(result)
    assert trial.rungs == () and scored.rungs == (result,) and scored.last is result
    with pytest.raises(dataclasses.FrozenInstanceError):
        scored.status = Status.KILLED
    assert scored.ended("killed").status is Status.KILLED
    failed = scored.ended(Status.FAILED)
    step = Exploited(1.0, "t1", {"x": 2}, {"x": 1}, 0.1, 0.9)
    continued = failed.exploited(step)
    assert continued.status is Status.RUNNING and continued.lineage == (step,)  # trains on
    assert continued.hparams_at(1.0) == {"x": 1} and continued.hparams_at(2.0) == {"x": 2}
    assert TrialRecord.from_dict(continued.to_dict()) == continued
    assert continued.to_dict()["status"] == "running"
    with pytest.raises(ValueError):
        trial.ended("lost")  # not a status


def test_best_and_front_points_read_as_their_json():
    best = Best("t0", {"x": 1}, 0.9, 3, model="models/t0.keras")
    assert dict(best) == best.to_dict() and best["value"] == 0.9 and best.get("schedule") is None
    assert Best.from_dict(best.to_dict()) == best
    assert repr(best) == repr(best.to_dict())  # shown as before: a notebook reads it back
    point = FrontPoint("t0", {"x": 1}, 3, {"val_accuracy": 0.9, "params": 100})
    assert point.to_dict() == {"trial_id": "t0", "hparams": {"x": 1}, "epochs": 3,
                               "val_accuracy": 0.9, "params": 100}
    assert FrontPoint.from_dict(point.to_dict()) == point and point["params"] == 100
