"""The objective (``conf/objective/``): what every ranking reads, and what the results report."""

from __future__ import annotations

import math
import warnings

import pytest

from packexp.config import check_search
from packexp.errors import ConfigError
from packexp.objectives import ACCURACY, Objective
from packexp.records.best import Best
from packexp.records.plots import best_so_far_points
from packexp.records.record import PackRecord, RungResult
from packexp.records.results import anytime
from packexp.records.search_result import SearchResult
from packexp.schedulers import Asha, Exploits, Hyperband, Planned
from packexp.schedulers.pbt import Pbt
from packexp.space import SearchSpace, Trial
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import HYPERBAND, FakeTrainer, fake_search
from packexp.testing.policies import DONOR, SPACE, simulate

LOSS = Objective("val_loss", "min")


def result(val_accuracy=None, val_loss=None, train_loss=None) -> RungResult:
    return RungResult("t0", 0, 0, 1.0, 1, val_accuracy, val_loss, train_loss, "p", None)


def test_a_score_is_the_metric_signed_so_that_higher_is_better():
    assert ACCURACY.score(result(val_accuracy=0.8)) == 0.8
    assert LOSS.score(result(val_loss=0.3)) == -0.3 and LOSS.value(result(val_loss=0.3)) == 0.3
    assert LOSS.signed(LOSS.score(result(val_loss=0.3))) == 0.3
    for missing in (None, math.nan, math.inf):  # a diverged member ranks last
        assert LOSS.score(result(val_loss=missing)) is None


@pytest.mark.parametrize(("override", "line"), [
    ("objective.metric=auc", r"^objective\.metric='auc': must be val_accuracy or val_loss "
                             r"or train_loss or val_mse or val_mae or val_r2 or params or "
                             r"flops, or val_<name> of a metric the model names "
                             r"\(model\.metrics\)$"),
    ("objective.mode=lowest", r"^objective\.mode='lowest': must be max or min$"),
])
def test_a_bad_objective_is_one_line_naming_the_key(override, line):
    with pytest.raises(ConfigError, match=line):
        check_search(compose_config([override]))


def test_the_config_group_chooses_the_objective():
    assert check_search(compose_config([]))[3] == ACCURACY
    assert check_search(compose_config(["objective=loss"]))[3] == LOSS
    assert check_search(compose_config(["objective.metric=train_loss",
                                        "objective.mode=min"]))[3] == Objective("train_loss",
                                                                                  "min")


PARETO = "objective.metrics=[{name:val_accuracy,mode:max},{name:params,mode:min}]"


@pytest.mark.parametrize("group", ["accuracy", "loss", "pareto"])
def test_objective_metrics_need_no_objective_pareto(group):
    objective = check_search(compose_config([f"objective={group}", PARETO]))[3]
    assert objective.goals == (("val_accuracy", "max"), ("params", "min"))
    assert (objective.metric, objective.mode) == ("val_accuracy", "max")


def test_objective_metrics_of_a_regression_keep_it_one():
    objective = check_search(compose_config([
        "objective=regression",
        "objective.metrics=[{name:val_mse,mode:min},{name:params,mode:min}]"]))[3]
    assert objective.regression and objective.several


def by_x(trial, epochs) -> float:
    return float(trial.hparams["x"])


@pytest.mark.parametrize("policy", [lambda: Hyperband(9, 3), lambda: Asha(9, 3)],
                         ids=["hyperband", "asha"])
def test_halving_under_a_min_objective_keeps_what_max_keeps_of_the_negated_metric(policy):
    """Minimising a loss of x decides exactly as maximising -x: the same plans, kills and
    ends, in the same order."""
    space = SearchSpace({"x": list(range(100))})
    minimised = simulate(policy(), space, by_x, objective=LOSS)
    maximised = simulate(policy(), space, lambda t, e: -by_x(t, e))
    assert minimised == maximised
    last = [p for p in minimised if isinstance(p, Planned)][-1]
    assert last.trials  # something was promoted: the test ranks real choices
    first = next(p for p in minimised if isinstance(p, Planned))
    promoted = next(p for p in minimised if isinstance(p, Planned)
                    and p.bracket == first.bracket and p.rung == 1)
    assert sorted(t.hparams["x"] for t in promoted.trials) == sorted(
        t.hparams["x"] for t in first.trials)[:len(promoted.trials)]  # the lowest losses


def test_a_population_exploits_the_lowest_loss_and_records_the_losses():
    members = [Trial(f"m{i}", {**DONOR, "learning_rate": 0.001 * (i + 1)}, (), seed=i)
               for i in range(6)]
    loss = {t.trial_id: 0.1 * (i + 1) for i, t in enumerate(members)}  # m0 the lowest
    made = simulate(Pbt(population=6, epochs=4, interval=2), SPACE,
                    lambda t, e: loss[t.trial_id], seed=7, draw=lambda n, salt: members[:n],
                    objective=LOSS)
    exploits = [e for m in made if isinstance(m, Exploits) for e in m.exploits]
    assert {e.member for e in exploits} == {"m4", "m5"}  # the two highest losses replaced
    assert {e.donor for e in exploits} <= {"m0", "m1"}  # by the two lowest
    for e in exploits:  # the journal records the losses themselves
        assert e.score == loss[e.member] and e.donor_score == loss[e.donor]


def test_a_search_under_the_loss_objective_finds_the_lowest_loss(tmp_path, monkeypatch):
    """The fake trainer's loss ranks trials opposite to its accuracy: the best by loss is the
    lowest x the search scored at its most epochs, and the results say so."""
    search = fake_search(tmp_path / "loss", FakeTrainer(), objective=LOSS)
    search.run(HYPERBAND)
    best = search.best()
    scored = [(r.val_loss, -r.epochs, i) for i, t in search.trials.items() for r in t.rungs
              if r.val_loss is not None]
    assert (best.value, -best.epochs, best.trial_id) == min(scored)
    assert best.metric == "val_loss" and best.val_accuracy == best.value / 2
    by_accuracy = fake_search(tmp_path / "acc", FakeTrainer())
    by_accuracy.run(HYPERBAND)
    assert by_accuracy.best().trial_id != best.trial_id  # the two rank trials the other way
    assert best.trial_id in [i for i, t in search.trials.items() if t.status == "finished"]


def test_the_results_rank_and_report_by_the_objective():
    results = {"objective": LOSS.to_dict(), "best": Best("t1", {}, 0.6, 3, None, "val_loss",
                                                          0.2).to_dict()}
    empty = {"trials": [], "packs": []}
    assert SearchResult.from_json("run", {**results, **empty}).tuned_for == LOSS
    assert SearchResult.from_json("run", empty).tuned_for == ACCURACY  # an older run's
    metrics = SearchResult.of("run", {
        **results, "wall_time_s": 1.0, "train_share": 0.5, "prediction_error": None,
        "phases": {}, "packs": [], "trials": []}).metrics()
    assert metrics["best_value"] == 0.2 and metrics["best_val_accuracy"] == 0.6


def test_best_so_far_falls_under_a_min_objective():
    class Record:
        def __init__(self, rungs):
            self.rungs = rungs

    packs = [PackRecord(f"p{i}", 0, 0, 1.0, ["t0"], started_s=float(i), elapsed_s=float(i + 1))
             for i in range(3)]
    rungs = [RungResult("t0", 0, 0, 1.0, 1, None, loss, None, f"p{i}", None)
             for i, loss in enumerate([0.5, 0.7, 0.2])]
    points = anytime([Record(rungs)], packs, LOSS)
    assert [p["best"] for p in points] == [0.5, 0.5, 0.2]
    results = {"objective": LOSS.to_dict(), "packs": [p.to_dict() for p in packs],
               "trials": [{"trial_id": "t0", "hparams": {}, "bracket": 0,
                           "rungs": [r.to_dict() for r in rungs]}]}
    points = best_so_far_points(SearchResult.from_json("run", results))
    assert [v for _, v in points] == [0.5, 0.2]


def exported_run(run_dir, fake_trainer, objective: Objective):
    """The fake search's results.json and Hydra's kept config in ``run_dir``, as ``tune``
    leaves them; the search."""
    import json

    import yaml

    from packexp.testing.fake_trainer import SPACE

    search = fake_search(run_dir, fake_trainer, objective=objective)
    search.run(HYPERBAND)
    search.finish()
    results = search.study.result(wall_time_s=1.0).to_json()
    (run_dir / "results.json").write_text(json.dumps(results))
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"search_space": {
        "_target_": "packexp.space.SearchSpace", "params": {
            k: list(v.values) for k, v in SPACE.dims.items()}}}))
    return search


def test_a_search_exported_to_optuna_loads_back_with_its_trials_and_direction(tmp_path,
                                                                               fake_trainer):
    """The fake search's results.json and Hydra's kept config, written as a study to SQLite
    and read back by ``optuna.load_study``, as optuna-dashboard reads it."""
    import optuna

    from packexp.app.optuna_study import to_optuna

    search = exported_run(tmp_path, fake_trainer, LOSS)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    to_optuna(tmp_path, storage, study_name="s")
    study = optuna.load_study(study_name="s", storage=storage)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    assert study.metric_names == ["val_loss"]
    assert len(study.trials) == len(search.trials)
    by_id = {t.user_attrs["trial_id"]: t for t in study.trials}
    states = {"finished": "COMPLETE", "killed": "PRUNED", "failed": "FAIL"}
    for trial_id, record in search.trials.items():
        t = by_id[trial_id]
        assert t.state.name == states[record.status] and t.params == record.hparams
        assert t.intermediate_values == {round(r.epochs): r.val_loss for r in record.rungs
                                         if r.val_loss is not None}
        if t.state.name == "COMPLETE":
            assert t.value == record.rungs[-1].val_loss
    complete = [r.rungs[-1].val_loss for r in search.trials.values() if r.status == "finished"]
    assert study.best_value == min(complete)
    assert {t.state.name for t in study.trials} == {"COMPLETE", "PRUNED", "FAIL"}


@pytest.mark.parametrize("loss_mode", ["min", "max"])  # every trial a trade-off; one best
def test_a_pareto_search_exported_to_optuna_has_every_goal_and_its_front(tmp_path, fake_trainer,
                                                                         loss_mode):
    """Under two goals the study has both directions and values, and Optuna's ``best_trials``
    are ``results.json``'s ``pareto_front``, which Optuna's Pareto plot draws."""
    import json

    import matplotlib
    import optuna

    from packexp.app.optuna_study import to_optuna

    matplotlib.use("Agg")
    objective = Objective(metrics=[{"name": "val_accuracy", "mode": "max"},
                                   {"name": "val_loss", "mode": loss_mode}])
    exported_run(tmp_path, fake_trainer, objective)
    front = json.loads((tmp_path / "results.json").read_text())["pareto_front"]
    study = to_optuna(tmp_path)
    assert [d.name for d in study.directions] == ["MAXIMIZE", loss_mode.upper() + "IMIZE"]
    assert study.metric_names == ["val_accuracy", "val_loss"]
    best = {t.user_attrs["trial_id"]: t.values for t in study.best_trials}
    assert best == {e["trial_id"]: [e["val_accuracy"], e["val_loss"]] for e in front}
    assert 0 < len(best) < len(study.trials) or loss_mode == "min"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.visualization.matplotlib.plot_pareto_front(study)


def test_exporting_to_optuna_twice_returns_the_study_and_another_runs_is_refused(
        tmp_path, fake_trainer):
    """A second call into the same storage returns the first call's study, no trial written
    twice; a study of that name with another run's trials is one ``ValueError``."""
    import optuna

    from packexp.app.optuna_study import to_optuna

    run = tmp_path / "run"
    exported_run(run, fake_trainer, LOSS)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = to_optuna(run, storage, study_name="s")
    again = to_optuna(run, storage, study_name="s")
    assert again.trials == first.trials == optuna.load_study(study_name="s",
                                                             storage=storage).trials
    assert len(optuna.get_all_study_summaries(storage)) == 1
    other = tmp_path / "other"
    exported_run(other, fake_trainer, ACCURACY)
    with pytest.raises(ValueError, match=r"study 's' in .*study\.db"):
        to_optuna(other, storage, study_name="s")
