from __future__ import annotations

import pytest
from hydra.utils import instantiate

from packexp.errors import ConfigError
from packexp.search_space import SearchSpace
from tests.conftest import compose_config


@pytest.fixture
def table3() -> SearchSpace:
    return instantiate(compose_config().search_space)


def test_table3_has_1056_configurations(table3):
    assert table3.size == 1056
    assert len(list(table3)) == 1056
    assert table3.params["batch_size"] == tuple(range(20, 71, 5))
    assert table3.params["learning_rate"] == (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
    assert table3.params["optimizer"] == ("adam", "sgd", "adagrad", "momentum")
    assert table3.params["activation"] == ("sigmoid", "leaky_relu", "tanh", "relu")


def test_paper_example_is_at_distance_5(table3):
    a = {"batch_size": 20, "optimizer": "sgd", "learning_rate": 0.01, "activation": "relu"}
    b = {"batch_size": 40, "optimizer": "adagrad", "learning_rate": 0.01, "activation": "relu"}
    assert table3.distance(a, b) == 5


def test_sampling_is_without_replacement_and_seeded(table3):
    trials = table3.sample(200, seed=7, bracket=2)
    keys = {tuple(t.hparams.values()) for t in trials}
    assert len(keys) == 200
    again = table3.sample(200, seed=7, bracket=2)
    assert [t.hparams for t in trials] == [t.hparams for t in again]
    assert [t.seed for t in trials] == [t.seed for t in again]
    other = table3.sample(200, seed=8, bracket=2)
    assert [t.hparams for t in trials] != [t.hparams for t in other]


def test_sampling_caps_at_the_space_size():
    space = SearchSpace({"batch_size": [8, 16], "optimizer": ["sgd"], "learning_rate": [0.1]})
    assert len(space.sample(10, seed=0, bracket=0)) == 2


def test_trial_ids_and_seeds_are_unique(table3):
    trials = table3.sample(81, seed=0, bracket=4) + table3.sample(34, seed=0, bracket=3)
    assert len({t.trial_id for t in trials}) == len(trials)
    assert len({t.seed for t in trials}) == len(trials)


@pytest.mark.parametrize(
    ("params", "categorical", "match"),
    [
        ({}, (), "search_space.params: is empty"),
        ({"batch_size": []}, (), "search_space.params.batch_size"),
        ({"batch_size": [1, 1]}, (), "repeats a value"),
        ({"optimizer": "adam"}, (), "search_space.params.optimizer"),
        ({"optimizer": ["adam"]}, ("colour",), "colour"),
    ],
)
def test_bad_spaces_name_the_key(params, categorical, match):
    with pytest.raises(ConfigError, match=match):
        SearchSpace(params, categorical)
