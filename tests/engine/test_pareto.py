"""Several objectives: non-dominated fronts, crowding, halving and promotion by them, and the
front a search reports (``objective=pareto``)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from packexp.config import check_search
from packexp.errors import ConfigError
from packexp.objectives import Objective, crowding, dominates, fronts, order
from packexp.records.record import RungResult, TrialRecord
from packexp.runner.study import Study, load
from packexp.schedulers import Asha, Hyperband, Planned
from packexp.space import SearchSpace
from packexp.testing.config import compose_config
from packexp.testing.policies import simulate
from packexp.testing.searches import search

PARETO = Objective(metrics=[{"name": "val_accuracy", "mode": "max"},
                            {"name": "params", "mode": "min"}])


def brute_force_front(points):
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


@pytest.mark.parametrize("seed", range(5))
def test_the_first_front_is_exactly_the_non_dominated_set(seed):
    rng = random.Random(seed)
    points = [(rng.choice([0.1, 0.5, 0.9]), -rng.choice([10, 100, 1000])) for _ in range(30)]
    every = fronts(points)
    assert every[0] == brute_force_front(points)
    assert sorted(itertools.chain(*every)) == list(range(30))  # each point in one front
    for k, front in enumerate(every[1:], start=1):  # each dominated by the front before
        assert all(any(dominates(points[j], points[i]) for j in every[k - 1]) for i in front)


def test_crowding_keeps_the_ends_and_prefers_the_sparse_middle():
    points = [(0.0, 4.0), (1.0, 3.0), (1.1, 2.9), (3.0, 1.0), (4.0, 0.0)]
    distance = crowding(points)
    assert distance[0] == distance[4] == math.inf
    assert distance[3] > distance[2] > distance[1]  # 1 sits between 0 and 2, close to both
    assert order([*points, None]) == [0, 4, 3, 2, 1, 5]  # one front; the missing last


def test_order_of_numbers_is_by_value_with_ties_in_order():
    assert order([0.5, None, 0.9, 0.5, math.nan]) == [2, 0, 3, 1, 4]


def test_several_metrics_are_checked_in_one_line_each():
    with pytest.raises(ValueError, match=r"^metrics\[1\]\.name='auc': must be "):
        Objective(metrics=[{"name": "val_accuracy"}, {"name": "auc"}])
    with pytest.raises(ValueError, match=r"names a metric twice"):
        Objective(metrics=[{"name": "params"}, {"name": "params", "mode": "min"}])
    with pytest.raises(ConfigError, match=r"^objective\.metrics: scheduler=pbt ranks by one "
                                          r"metric, and \['val_accuracy', 'params'\] are "
                                          r"several; "):
        check_search(compose_config(["objective=pareto", "scheduler=pbt"]))
    assert check_search(compose_config(["objective=pareto"]))[3] == PARETO
    assert PARETO.metric == "val_accuracy" and PARETO.several
    assert Objective.from_dict(PARETO.to_dict()) == PARETO


def metrics(trial, epochs) -> dict[str, float]:
    """Accuracy rises with x; the model grows with x: a trade-off, every x on one front."""
    x = trial.hparams["x"]
    return {"val_accuracy": x / 100, "params": 100 + x * 10}


@pytest.mark.parametrize("policy", [lambda: Hyperband(9, 3), lambda: Asha(9, 3)],
                         ids=["hyperband", "asha"])
def test_halving_by_front_and_crowding_promotes_the_trade_offs_ends(policy):
    """Every trial is on one front, so the crowding distance decides: a rung keeps its
    extremes (the most accurate, the smallest) first."""
    space = SearchSpace({"x": list(range(1, 100))})
    made = simulate(policy(), space, metrics, objective=PARETO)
    first = next(p for p in made if isinstance(p, Planned))
    promoted = next(p for p in made if isinstance(p, Planned) and p.bracket == first.bracket
                    and p.rung == 1)
    xs = sorted(t.hparams["x"] for t in first.trials)
    kept = {t.hparams["x"] for t in promoted.trials}
    assert {xs[0], xs[-1]} <= kept or (len(kept) < 2 and kept <= {xs[0], xs[-1]})


def test_the_front_is_each_trials_last_rung_not_dominated():
    book = Study(None, PARETO)
    for i, rungs in enumerate([[(1, 0.5, 100)], [(1, 0.4, 50), (3, 0.9, 50)],
                               [(1, 0.6, 200)], [(1, 0.95, 1000)], [(1, None, 10)]]):
        book.trials[f"t{i}"] = TrialRecord(f"t{i}", {"x": i}, 0, rungs=[
            RungResult(f"t{i}", 0, k, e, 1, a, None, None, "p", None, params=n)
            for k, (e, a, n) in enumerate(rungs)])
    front = book.front()
    assert [e["trial_id"] for e in front] == ["t1", "t3"]  # t0 and t2 lose to t1's last rung
    assert front[0] == {"trial_id": "t1", "hparams": {"x": 1}, "epochs": 3,
                        "val_accuracy": 0.9, "params": 50}
    assert Study().front() is None  # one objective: no front


@pytest.mark.tf
@pytest.mark.search
def test_a_pareto_search_reports_its_front_and_draws_it(tmp_path, capsys):
    results = search(tmp_path, "objective=pareto", "+search_space.params.width=[8,32,128]",
                     "scheduler.R=3", "tracking=none", "pack.jit_compile=false", strategy=None)
    assert "Pareto front of val_accuracy and params" in capsys.readouterr().out
    assert (tmp_path / "pareto.png").is_file()
    last = {t["trial_id"]: [r for r in t["rungs"] if r["val_accuracy"] is not None][-1]
            for t in results["trials"] if any(r["val_accuracy"] is not None for r in t["rungs"])}
    ids = list(last)
    points = [(last[i]["val_accuracy"], -last[i]["params"]) for i in ids]
    assert [e["trial_id"] for e in results["pareto_front"]] == [
        ids[i] for i in brute_force_front(points)]
    assert load(tmp_path).best_trials == results["pareto_front"]
