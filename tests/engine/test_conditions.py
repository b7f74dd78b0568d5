"""Conditional search spaces: ``when: {parent: [values]}`` makes a hyper-parameter absent from
trials where its parents say so, never defaulted; draws, TPE, the kNN distance and the
no-repeat rule all handle the absence."""

from __future__ import annotations

import pytest

from packexp.config import check_search
from packexp.errors import ConfigError
from packexp.samplers import Observation
from packexp.samplers.tpe import TpeSampler
from packexp.space import SearchSpace
from packexp.testing.config import compose_config
from packexp.testing.searches import search_on_fake

PARAMS = {
    "optimizer": ["adam", "sgd", "adagrad"],
    "momentum": {"kind": "choice", "values": [0.5, 0.9], "when": {"optimizer": ["sgd"]}},
    "nesterov": {"kind": "choice", "values": [True, False], "when": {"momentum": [0.9]}},
    "beta_1": {"kind": "float", "low": 0.8, "high": 0.99, "when": {"optimizer": "adam"}},
    "batch_size": [16, 32],
}


def finite() -> SearchSpace:
    return SearchSpace({k: v for k, v in PARAMS.items() if k != "beta_1"})


def test_an_inactive_hyper_parameter_is_absent_and_the_grid_lists_each_configuration_once():
    space = finite()
    configs = list(space)
    # adam and adagrad: 2 each; sgd: momentum 0.5 (2), momentum 0.9 with nesterov (2 x 2)
    assert len(configs) == space.size == 2 + 2 + 2 + 4
    assert len({tuple(c.items()) for c in configs}) == len(configs)
    for c in configs:
        assert ("momentum" in c) == (c["optimizer"] == "sgd")
        assert ("nesterov" in c) == (c.get("momentum") == 0.9)
    drawn = space.sample(10, seed=3, bracket=0)
    assert sorted(map(repr, (t.hparams for t in drawn))) == sorted(map(repr, configs))
    again = space.sample(4, seed=3, bracket=1, drawn=[t.hparams for t in drawn[:6]])
    assert {repr(t.hparams) for t in again} == {repr(t.hparams) for t in drawn[6:]}


def test_a_child_listed_before_its_parent_still_follows_it():
    space = SearchSpace({"momentum": {"kind": "choice", "values": [0.5, 0.9],
                                      "when": {"optimizer": ["sgd"]}},
                         "optimizer": ["adam", "sgd"], "batch_size": [8]})
    assert space.order.index("optimizer") < space.order.index("momentum")
    assert sorted(map(repr, space)) == sorted(map(repr, [
        {"optimizer": "adam", "batch_size": 8},
        {"momentum": 0.5, "optimizer": "sgd", "batch_size": 8},
        {"momentum": 0.9, "optimizer": "sgd", "batch_size": 8}]))


def test_a_float_range_under_a_condition_is_drawn_only_where_active_and_repeats_are_redrawn():
    space = SearchSpace(PARAMS)
    trials = space.sample(40, seed=0, bracket=0)
    for t in trials:
        assert ("beta_1" in t.hparams) == (t.hparams["optimizer"] == "adam")
        if "beta_1" in t.hparams:
            assert 0.8 <= t.hparams["beta_1"] <= 0.99
    discrete = [repr(t.hparams) for t in trials if t.hparams["optimizer"] != "adam"]
    assert len(set(discrete)) == min(len(discrete), 2 + 8)  # no repeat while others remain


def test_the_knn_distance_counts_an_absent_hyper_parameter_as_a_difference():
    space = finite()
    adam = {"optimizer": "adam", "batch_size": 16}
    sgd = {"optimizer": "sgd", "momentum": 0.5, "batch_size": 16}
    assert space.distance(adam, adam) == 0
    assert space.distance(adam, {**adam, "optimizer": "adagrad"}) == 2  # the lists' index gap
    assert space.distance(adam, sgd) == 1 + 1  # the optimizer's gap, momentum's presence
    assert space.distance(sgd, {**sgd, "momentum": 0.9, "nesterov": True}) == 1 + 1


@pytest.mark.parametrize(("params", "line"), [
    ({"optimizer": ["sgd"], "momentum": {"kind": "choice", "values": [0.9],
                                         "when": {"optimiser": ["sgd"]}}},
     r"^search_space\.params\.momentum\.when: names 'optimiser', which is not another "
     r"hyper-parameter of the space \(optimizer, momentum\)$"),
    ({"optimizer": ["sgd"], "momentum": {"kind": "choice", "values": [0.9],
                                         "when": {"optimizer": ["sgdd"]}}},
     r"^search_space\.params\.momentum\.when\.optimizer: 'sgdd' is not one of optimizer's "
     r"values \['sgd'\]$"),
    ({"width": {"kind": "int", "low": 8, "high": 16}, "m": {"kind": "choice", "values": [1],
                                                            "when": {"width": [8]}}},
     r"^search_space\.params\.m\.when\.width: width is a kind=int range; a condition names "
     r"values of a choice$"),
    ({"a": {"kind": "choice", "values": [1, 2], "when": {"b": [1]}},
      "b": {"kind": "choice", "values": [1, 2], "when": {"a": [1]}}},
     r"^search_space\.params: the conditions form a cycle: a -> b -> a \(each one's when "
     r"names the next\)$"),
    ({"optimizer": ["sgd"], "batch_size": {"kind": "choice", "values": [8],
                                           "when": {"optimizer": ["sgd"]}}},
     r"^search_space\.params\.batch_size\.when: every trial needs batch_size; it cannot be "
     r"conditional$"),
    ({"optimizer": ["sgd"], "m": {"kind": "choice", "values": [1], "when": ["optimizer"]}},
     r"^search_space\.params\.m\.when=\['optimizer'\]: must map a parent hyper-parameter to "
     r"its values, e\.g\. \{optimizer: \[sgd\]\}$"),
])
def test_a_bad_condition_is_one_line_naming_it(params, line):
    with pytest.raises(ConfigError, match=line):
        SearchSpace(params)


def test_a_population_refuses_a_conditional_space_in_one_line():
    with pytest.raises(ConfigError, match=r"^search_space\.params\.momentum\.when: "
                                          r"scheduler=pbt explores every hyper-parameter"):
        check_search(compose_config([
            "scheduler=pbt", "+search_space.params.momentum={kind:choice,values:[0.5,0.9],"
                             "when:{optimizer:[sgd]}}"]))


def test_tpe_draws_a_conditional_space_with_absence_never_defaulted():
    params = {k: v for k, v in PARAMS.items() if k != "nesterov"}
    space = SearchSpace({**params, "momentum": {"kind": "float", "low": 0.5, "high": 0.99,
                                                "when": {"optimizer": ["sgd"]}}})
    history = [Observation(dict(t.hparams), 1.0, 1.0 if t.hparams["optimizer"] == "sgd"
                           else 0.0) for t in space.sample(12, seed=1, bracket=0)]
    sampler = TpeSampler(random_fraction=0.0, min_points=4)
    drawn = sampler.sample(space, 20, seed=1, bracket=1, history=history,
                           drawn=[o.hparams for o in history])
    for t in drawn:
        assert t.hparams == space.project(t.hparams)  # nothing inactive, nothing missing
        for name in space.dims:
            assert (name in t.hparams) == space.active(name, t.hparams)
    assert sum(t.hparams["optimizer"] == "sgd" for t in drawn) > len(drawn) / 2  # it learned


@pytest.mark.tf  # composing mlp3's config imports Keras
def test_a_conditional_search_runs_end_to_end(tmp_path):
    """The whole search (in this process, on the fake trainer) on a conditional space."""
    trials = search_on_fake(tmp_path, "experiment=quick", "tracking=none", "scheduler.R=9",
                            "pack.fusion=auto", "+search_space.params.momentum={kind:float,"
                            "low:0.5,high:0.99,when:{optimizer:[sgd]}}")["trials"]
    assert any(t["hparams"]["optimizer"] == "sgd" for t in trials)
    for t in trials:
        assert ("momentum" in t["hparams"]) == (t["hparams"]["optimizer"] == "sgd")
