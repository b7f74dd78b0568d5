"""Contract tests over every strategy found in conf/strategy/."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hydra.utils import instantiate

from packexp.space import SearchSpace, Trial
from packexp.strategies import Capacity, RungContext, WeighsCosts
from packexp.testing.calibration import device
from packexp.testing.config import CONF_DIR, compose_config

STRATEGIES = sorted(p.stem for p in Path(CONF_DIR, "strategy").glob("*.yaml"))


def make_strategy(name: str, seed: int = 0, **overrides):
    cfg = compose_config([f"strategy={name}", f"seed={seed}"])
    strategy = instantiate(cfg.strategy, **overrides)
    if isinstance(strategy, WeighsCosts):  # a fake device on which packs of two pay off
        strategy.use_costs(device(plain=(5e-3, 1e-3, 1e-5), fused=(5e-3, 5e-4, 1e-5)))
    return strategy


@pytest.fixture(scope="module")
def trials() -> list[Trial]:
    space = instantiate(compose_config().search_space)
    return space.sample(40, seed=3, bracket=3)


def test_all_four_strategies_are_configured():
    assert {"none", "batch_size", "random", "knn", "cost"} <= set(STRATEGIES)


@pytest.mark.parametrize("name", STRATEGIES)
class TestStrategyContract:
    @pytest.mark.parametrize("limit", [1, 3, 8])
    def test_every_trial_in_exactly_one_pack(self, name, trials, limit):
        packs = make_strategy(name).pack(trials, Capacity.members(limit))
        placed = [t.trial_id for p in packs for t in p]
        assert sorted(placed) == sorted(t.trial_id for t in trials)
        assert all(p for p in packs)

    @pytest.mark.parametrize("limit", [1, 3, 8])
    def test_no_pack_exceeds_capacity(self, name, trials, limit):
        packs = make_strategy(name).pack(trials, Capacity.members(limit))
        assert max(len(p) for p in packs) <= limit

    def test_respects_a_cost_model(self, name, trials):
        capacity = Capacity(limit=100.0, cost=lambda t: float(t.hparams["batch_size"]))
        for p in make_strategy(name).pack(trials, capacity):
            assert len(p) == 1 or sum(t.hparams["batch_size"] for t in p) <= 100

    def test_deterministic_under_a_seed(self, name, trials):
        a = make_strategy(name, seed=5).pack(trials, Capacity.members(4))
        b = make_strategy(name, seed=5).pack(trials, Capacity.members(4))
        assert [[t.trial_id for t in p] for p in a] == [[t.trial_id for t in p] for p in b]

    def test_does_not_depend_on_call_order(self, name, trials):
        strategy = make_strategy(name, seed=5)
        first = strategy.pack(trials, Capacity.members(4))
        strategy.pack(trials[:10], Capacity.members(4))
        again = strategy.pack(trials, Capacity.members(4))
        assert [[t.trial_id for t in p] for p in first] == [
            [t.trial_id for t in p] for p in again
        ]

    def test_empty_rung(self, name):
        assert make_strategy(name).pack([], Capacity.members(4)) == []


def test_none_gives_singletons(trials):
    packs = make_strategy("none").pack(trials, Capacity.members(8))
    assert [len(p) for p in packs] == [1] * len(trials)


def test_batch_size_packs_only_equal_batch_sizes(trials):
    packs = make_strategy("batch_size").pack(trials, Capacity.members(8))
    for p in packs:
        assert len({t.hparams["batch_size"] for t in p}) == 1
    assert len(packs) < len(trials)


def test_random_fills_packs_to_capacity(trials):
    packs = make_strategy("random").pack(trials, Capacity.members(8))
    assert [len(p) for p in packs] == [8] * 5


def test_random_depends_on_seed(trials):
    a = make_strategy("random", seed=1).pack(trials, Capacity.members(8))
    b = make_strategy("random", seed=2).pack(trials, Capacity.members(8))
    assert [[t.trial_id for t in p] for p in a] != [[t.trial_id for t in p] for p in b]


def test_knn_packs_nearest_neighbours_of_the_centroid(trials):
    space = instantiate(compose_config().search_space)
    packs = make_strategy("knn").pack(trials, Capacity.members(4))
    taken: set[str] = set()
    for p in packs:
        centroid, mates = p[0], p[1:]
        left_out = [t for t in trials if t.trial_id not in taken and t not in p]
        if mates and left_out:
            farthest_in = max(space.distance(centroid.hparams, t.hparams) for t in mates)
            nearest_out = min(space.distance(centroid.hparams, t.hparams) for t in left_out)
            assert farthest_in <= nearest_out
        taken |= {t.trial_id for t in p}


def test_knn_threshold_limits_distance(trials):
    space = instantiate(compose_config().search_space)
    packs = make_strategy("knn", threshold=2).pack(trials, Capacity.members(8))
    for p in packs:
        assert all(space.distance(p[0].hparams, t.hparams) <= 2 for t in p[1:])
    unlimited = make_strategy("knn").pack(trials, Capacity.members(8))
    assert len(packs) > len(unlimited)


def test_knn_zero_threshold_packs_only_identical_configs(trials):
    packs = make_strategy("knn", threshold=0).pack(trials, Capacity.members(8))
    assert all(len(p) == 1 for p in packs)  # sampling is without replacement


def test_knn_groups_closer_configs_than_random(trials):
    space = instantiate(compose_config().search_space)

    def spread(packs):
        return sum(space.distance(a.hparams, b.hparams) for p in packs for a in p for b in p)

    knn = make_strategy("knn").pack(trials, Capacity.members(8))
    rnd = make_strategy("random").pack(trials, Capacity.members(8))
    assert spread(knn) < spread(rnd)


def test_knn_rejects_negative_threshold():
    from packexp.strategies.knn import KnnStrategy

    with pytest.raises(ValueError, match="threshold=-1"):
        KnnStrategy(threshold=-1)


MIXED = {"batch_size": {"kind": "int", "low": 20, "high": 70, "step": 5},
         "optimizer": ["adam", "sgd", "adagrad", "momentum"],
         "learning_rate": {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True},
         "activation": {"kind": "choice", "values": ["relu", "tanh"]},
         "dropout": {"kind": "float", "low": 0.0, "high": 0.5}}


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("shaping", [False, True], ids=["finite_structures", "endless"])
def test_every_strategy_plans_a_rung_of_every_kind(name, shaping):
    """Int, float (log and linear) ranges and choices; with ``dropout``, a float range that
    shapes the model, so the space holds endless member structures."""
    params = MIXED if shaping else {k: v for k, v in MIXED.items() if k != "dropout"}
    space = SearchSpace(params, categorical=["optimizer", "activation"])
    # Optimizers with update rules are runtime: structures are activations (x dropout).
    assert space.structures == (math.inf if shaping else 2)
    trials = space.sample(30, seed=1, bracket=2)
    rung = RungContext(steps={t.trial_id: 50 for t in trials}, future_trials=60,
                       structures=space.structures)
    capacity = Capacity(limit=200.0, cost=lambda t: float(t.hparams["batch_size"]),
                        max_members=4)
    planned = make_strategy(name).plan(trials, capacity, rung)
    assert sorted(t.trial_id for g, _ in planned for t in g) == sorted(
        t.trial_id for t in trials)
    assert all(capacity.fits(g) for g, _ in planned)
    if name == "batch_size":
        assert all(len({t.hparams["batch_size"] for t in g}) == 1 for g, _ in planned)
    if name in ("random", "knn", "batch_size"):
        assert max(len(g) for g, _ in planned) > 1
