"""Population Based Training's arithmetic and decisions (``schedulers/pbt.py``): pure
Python, milliseconds."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from packexp.objectives import ACCURACY
from packexp.records.record import Exploit, Exploited, RungResult
from packexp.schedulers import Exploits, Plan, Planned
from packexp.schedulers.base import schedule
from packexp.schedulers.pbt import (
    Pbt,
    explore,
    interval_ends,
    pairs,
    perturb,
    ranked,
    replaced_count,
)
from packexp.space import SearchSpace, Trial
from packexp.space.dimensions import Choice, FloatRange, IntRange
from packexp.testing.policies import DONOR, SPACE, simulate


@pytest.mark.parametrize(("epochs", "interval", "ends"), [
    (27, 3, [3, 6, 9, 12, 15, 18, 21, 24, 27]),
    (10, 4, [4, 8, 10]),
    (5, 5, [5]),
    (3, 1, [1, 2, 3]),
])
def test_intervals_end_every_interval_and_at_the_last_epoch(epochs, interval, ends):
    assert interval_ends(epochs, interval) == [float(e) for e in ends]
    pbt = Pbt(population=4, epochs=epochs, interval=interval)
    (bracket,) = pbt.brackets()
    assert [r.r for r in bracket.rungs] == ends
    assert {r.n for r in bracket.rungs} == {4}
    assert pbt.budget == 4 * epochs == pbt.epochs(bracket)  # continued: each epoch once


@pytest.mark.parametrize(("population", "quantile", "k"), [
    (16, 0.25, 4), (16, 0.5, 8), (5, 0.5, 2), (2, 0.25, 1), (10, 0.01, 1), (3, 0.5, 1)])
def test_the_replaced_share_is_rounded_up_and_at_most_half(population, quantile, k):
    assert replaced_count(population, quantile) == k
    assert Pbt(population=population, quantile=quantile).replaced() == k


def test_members_rank_from_a_diverged_one_to_the_best_ties_by_id():
    assert ranked({"b": 0.5, "a": 0.5, "c": None, "d": 0.9, "e": 0.1}) == [
        "c", "e", "a", "b", "d"]


def test_the_worst_copy_the_best_and_every_diverged_member_is_replaced():
    scores = {f"m{i}": i / 10 for i in range(8)}
    got = pairs(scores, 2, np.random.default_rng(0))
    assert [m for m, _ in got] == ["m0", "m1"]
    assert {d for _, d in got} <= {"m6", "m7"}
    scores.update(m3=None, m4=None, m5=None)  # more diverged than the quantile
    got = pairs(scores, 2, np.random.default_rng(0))
    assert [m for m, _ in got] == ["m3", "m4", "m5"]  # every diverged one, past the quantile
    assert all(d in ("m6", "m7") for _, d in got)
    assert pairs({"a": None, "b": None}, 1, np.random.default_rng(0)) == []  # no donor


def test_explore_stays_within_the_space_for_every_kind():
    rng = np.random.default_rng(1)
    for _ in range(500):
        values = explore(DONOR, SPACE, rng, (0.5, 2.0), 0.3)
        assert set(values) == set(DONOR)
        for name, dim in SPACE.dims.items():
            v = values[name]
            if isinstance(dim, FloatRange):
                assert dim.low <= v <= dim.high
            else:
                assert v in dim.values, (name, v)
                assert type(v) is type(DONOR[name])


def test_without_resampling_a_categorical_choice_stays_the_donors_and_the_others_move():
    rng = np.random.default_rng(2)
    for _ in range(100):
        values = explore(DONOR, SPACE, rng, (0.8, 1.2), 0.0)
        assert values["optimizer"] == "sgd" and values["activation"] == "tanh"
        assert values["learning_rate"] in (pytest.approx(0.008), pytest.approx(0.012))
        assert values["batch_size"] in (35, 40, 50, 55)
        assert values["width"] in (16, 64)  # a numeric list's neighbour


def test_factors_of_one_and_no_resampling_leave_the_donors_values():
    assert explore(DONOR, SPACE, np.random.default_rng(3), (1.0,), 0.0) == DONOR


def test_perturb_rounds_an_int_range_to_its_grid_and_clips_at_the_bounds():
    dim = IntRange("batch_size", 20, 70, 5)
    assert perturb(dim, 45, 1.2) == 55  # 54 -> the nearest value
    assert perturb(dim, 20, 0.8) == 20  # clipped at low
    assert perturb(dim, 70, 1.2) == 70
    assert perturb(IntRange("units", 1, 3), 1, 1.2) == 2  # too small to move by the factor
    assert perturb(FloatRange("lr", 0.001, 0.1, log=True), 0.09, 1.2) == 0.1
    assert perturb(Choice("w", (16, 32, 64)), 16, 0.8) == 16
    assert perturb(Choice("a", ("x", "y"), categorical=True), "x", 1.2) == "x"


def test_explore_makes_no_change_the_donors_state_does_not_fit():
    def fits(donor, values):  # as if width shaped the model
        return donor["width"] == values["width"]

    rng = np.random.default_rng(4)
    for _ in range(200):
        values = explore(DONOR, SPACE, rng, (0.5, 2.0), 0.5, fits)
        assert values["width"] == 32


def test_explore_draws_the_same_numbers_whatever_the_values():
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    explore(DONOR, SPACE, a)
    explore({**DONOR, "learning_rate": 0.1, "batch_size": 70}, SPACE, b)
    assert a.random() == b.random()


def test_the_schedule_of_the_best_follows_each_exploit_back_to_its_donor():
    initial = {m: {"lr": i} for i, m in enumerate("abc")}
    def step(epoch, donor, lr):
        return Exploited(epoch, donor, {"lr": lr}, {}, None, None)

    lineage = {"c": [step(3.0, "a", 10), step(9.0, "b", 20)], "b": [step(6.0, "a", 30)]}
    assert schedule("c", 12.0, lineage, initial) == [
        {"from": 0.0, "to": 6.0, "trial_id": "a", "hparams": {"lr": 0}},
        {"from": 6.0, "to": 9.0, "trial_id": "b", "hparams": {"lr": 30}},
        {"from": 9.0, "to": 12.0, "trial_id": "c", "hparams": {"lr": 20}}]
    # At epoch 9 the second exploit has not happened yet: c's weights were a's until 3.
    assert schedule("c", 9.0, lineage, initial) == [
        {"from": 0.0, "to": 3.0, "trial_id": "a", "hparams": {"lr": 0}},
        {"from": 3.0, "to": 9.0, "trial_id": "c", "hparams": {"lr": 10}}]
    assert schedule("a", 12.0, lineage, initial) == [
        {"from": 0.0, "to": 12.0, "trial_id": "a", "hparams": {"lr": 0}}]


@pytest.mark.parametrize(("key", "value"), [
    ("population", 1), ("epochs", 0), ("interval", 0), ("interval", 28), ("quantile", 0.6),
    ("quantile", 0), ("perturbation_factors", []), ("perturbation_factors", [0.8, -1]),
    ("resample_probability", 1.5), ("R", 3), ("continue_on_promotion", False)])
def test_a_bad_setting_is_one_line_naming_it(key, value):
    with pytest.raises(ValueError, match=f"^{key}=") as e:
        Pbt(**{key: value})
    assert "\n" not in str(e.value)


def test_the_plan_names_the_population_its_intervals_and_its_budget():
    facts = Pbt(population=16, epochs=27, interval=3).plan_facts()
    assert facts["population"] == 16 and facts["interval"] == 3
    assert facts["interval_ends"][-1] == 27.0 and len(facts["interval_ends"]) == 9
    assert facts["budget_epochs"] == 432 and facts["replaced_per_interval"] == 4


def members(n: int) -> list[Trial]:
    """A population whose members score by their learning rate: m0 the lowest."""
    return [Trial(f"m{i}", {**DONOR, "learning_rate": 0.001 * (i + 1)}, (), seed=i)
            for i in range(n)]


def by_rate(trial: Trial, epochs: float) -> float:
    return trial.hparams["learning_rate"]


def run(policy: Pbt) -> list:
    return simulate(policy, SPACE, by_rate, seed=7, draw=lambda n, salt: members(n))


def test_the_policy_plans_every_interval_and_exploits_between_them():
    made = run(Pbt(population=4, epochs=6, interval=2))
    plans = [m for m in made if isinstance(m, Planned)]
    exploited = [m for m in made if isinstance(m, Exploits)]
    assert [p.rung for p in plans] == [0, 1, 2]
    assert [e.rung for e in exploited] == [0, 1]
    exploits = exploited[0].exploits
    assert [(e.member, e.donor) for e in exploits] == [("m0", "m3")]  # the lowest rate
    trained = [{t.trial_id: dict(t.hparams) for t in p.trials} for p in plans]
    assert trained[1]["m0"] == exploits[0].hparams
    assert exploits[0].before == trained[0]["m0"]
    assert made.index(exploited[0]) < made.index(plans[1])  # exploits before the next plan
    assert run(Pbt(population=4, epochs=6, interval=2)) == made  # decisions are the seed's


def test_a_policy_told_its_exploits_makes_no_new_ones():
    """A resume tells the policy the journaled exploits: it plans the next interval without
    deciding any again."""
    policy = Pbt(population=4, epochs=4, interval=2)
    policy.start(SimpleNamespace(seed=7, space=SPACE, max_members=8, fits=lambda a, b: True,
                                 objective=ACCURACY))
    [first] = policy.decide(0)
    assert first == Plan(0, 0, draw=4)
    population = members(4)
    assert policy.on_plan(Planned(0, 0, tuple(population), 4)) == []
    for t in population:
        policy.on_result(RungResult(t.trial_id, 0, 0, 2.0, 1, by_rate(t, 2), None, None, "p",
                                    None))
    [decided, plan] = policy.decide(0)
    assert isinstance(decided, Exploits) and plan == Plan(0, 1, ("m0", "m1", "m2", "m3"))
    journaled = Exploits(0, 0, (Exploit("m1", "m2", {**DONOR, "learning_rate": 0.05}, DONOR,
                                        0.1, 0.9),))
    policy.on_exploits(journaled)
    assert policy.decide(0) == [plan]


def test_an_exploit_record_reads_back_as_written():
    e = Exploit("m1", "m2", {"lr": 0.1}, {"lr": 0.2}, None, 0.5)
    assert Exploit.from_dict(e.to_dict()) == e
    assert math.isclose(Exploit.from_dict(e.to_dict()).donor_score, 0.5)


def test_a_list_of_words_not_declared_categorical_stays_the_donors_too():
    assert perturb(Choice("lr_schedule", ("constant", "cosine")), "constant", 1.2) == "constant"


def test_every_diverged_member_copies_one_that_did_not_and_none_if_all_diverged():
    scores = {"a": None, "b": None, "c": None, "d": 0.5, "e": 0.6}
    got = pairs(scores, 1, np.random.default_rng(0))
    assert [m for m, _ in got] == ["a", "b", "c"] and {d for _, d in got} == {"e"}
    assert pairs(dict.fromkeys("abc"), 1, np.random.default_rng(0)) == []


def test_a_space_with_a_learning_rate_schedule_is_refused_in_one_line():
    from packexp.errors import ConfigError

    space = SearchSpace({**{k: [DONOR[k]] for k in DONOR}, "lr_schedule": ["cosine"]})
    with pytest.raises(ConfigError, match=r"^search_space.params.lr_schedule: scheduler=pbt"):
        Pbt().check_space(space)
    Pbt().check_space(SPACE)
