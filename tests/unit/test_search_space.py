from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hydra.utils import instantiate

from packexp.errors import ConfigError
from packexp.space import GRID_LIMIT, SearchSpace, derive_seed
from packexp.space.dimensions import Choice, FloatRange, IntRange
from packexp.testing.config import compose_config


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


def test_table3_trials_are_those_of_the_value_list_space(table3):
    """Pinned from the space of value lists only: ranges changed nothing for Table 3."""
    trials = table3.sample(3, seed=0, bracket=4)
    assert [(t.trial_id, dict(t.hparams), t.seed) for t in trials] == [
        ("b4-t000", {"batch_size": 70, "optimizer": "adam", "learning_rate": 1e-06,
                     "activation": "relu"}, 2040376534),
        ("b4-t001", {"batch_size": 60, "optimizer": "sgd", "learning_rate": 1e-06,
                     "activation": "sigmoid"}, 366692492),
        ("b4-t002", {"batch_size": 20, "optimizer": "adam", "learning_rate": 0.01,
                     "activation": "sigmoid"}, 3971982538),
    ]
    assert trials[2].features == (0.0, 0.5, 0.0, 0.0, 0.0, 4.0, 0.5, 0.0, 0.0, 0.0)


@pytest.fixture
def ranges() -> SearchSpace:
    return instantiate(compose_config(["search_space=ranges"]).search_space)


def test_ranges_yaml_holds_the_three_kinds(ranges):
    assert {n: type(d) for n, d in ranges.dims.items()} == {
        "batch_size": IntRange, "optimizer": Choice, "learning_rate": FloatRange,
        "activation": Choice}
    assert ranges.params["batch_size"] == range(20, 71, 5)
    assert "learning_rate" not in ranges.params  # a continuum has no value list
    assert ranges.size == math.inf
    # The activation: lr, batch size and every optimizer with an update rule are runtime,
    assert ranges.structures == 4
    assert ranges.count_structures(("activation",)) == 1  # and mlp3's activation
    assert ranges.first == {"batch_size": 20, "optimizer": "adam", "learning_rate": 1e-4,
                            "activation": "sigmoid"}
    with pytest.raises(TypeError, match="learning_rate"):
        next(iter(ranges))


def test_a_float_range_that_shapes_the_model_gives_endless_structures():
    space = SearchSpace({"batch_size": [32], "dropout": {"kind": "float", "low": 0, "high": 0.5},
                         "learning_rate": {"kind": "float", "low": 0.01, "high": 0.1}})
    assert space.structures == math.inf


@pytest.mark.parametrize(
    ("spec", "x", "y", "expected"),
    [
        ({"kind": "int", "low": 32, "high": 256, "step": 32}, 64, 128, 2 / 7),
        ({"kind": "int", "low": 20, "high": 70, "step": 5}, 20, 70, 1.0),
        ({"kind": "int", "low": 8, "high": 8}, 8, 8, 0.0),
        ({"kind": "float", "low": 0.0, "high": 2.0}, 0.5, 1.5, 0.5),
        ({"kind": "float", "low": 1e-4, "high": 1e-1, "log": True}, 1e-3, 1e-2, 1 / 3),
        ({"kind": "float", "low": 1e-4, "high": 1e-1, "log": True}, 1e-4, 1e-1, 1.0),
        ([0.1, 0.2, 0.4, 0.8], 0.1, 0.8, 3.0),  # a numeric choice: the index gap
    ],
)
def test_distance_of_one_dimension(spec, x, y, expected):
    space = SearchSpace({"p": spec})
    assert space.distance({"p": x}, {"p": y}) == pytest.approx(expected, abs=1e-12)


def test_distance_over_mixed_kinds_by_hand(ranges):
    a = {"batch_size": 20, "optimizer": "adam", "learning_rate": 1e-3, "activation": "relu"}
    b = {"batch_size": 45, "optimizer": "sgd", "learning_rate": 1e-2, "activation": "relu"}
    # batch (45 - 20) / 50, optimizer differs, lr one decade of three, activation equal.
    assert ranges.distance(a, b) == pytest.approx(0.5 + 1 + 1 / 3 + 0)
    assert ranges.features(a) == pytest.approx(
        (0.0, 0.5, 0.0, 0.0, 0.0, 1 / 3, 0.0, 0.0, 0.0, 0.5))


def test_sampling_a_space_with_a_float_range(ranges):
    trials = ranges.sample(500, seed=7, bracket=2)
    assert len(trials) == 500  # an endless space is never exhausted
    assert [t.trial_id for t in trials[:2]] == ["b2-t000", "b2-t001"]
    again = ranges.sample(500, seed=7, bracket=2)
    assert [t.hparams for t in trials] == [t.hparams for t in again]
    assert [t.seed for t in trials] == [t.seed for t in again]
    assert [t.hparams for t in ranges.sample(500, seed=7, bracket=3)] != [
        t.hparams for t in trials]
    assert [t.seed for t in trials] == [derive_seed(7, 2, i + 1) for i in range(500)]
    json.dumps([t.hparams for t in trials])  # plain Python values
    for t in trials:
        assert type(t.hparams["batch_size"]) is int and t.hparams["batch_size"] % 5 == 0
        assert 20 <= t.hparams["batch_size"] <= 70
        assert type(t.hparams["learning_rate"]) is float
        assert 1e-4 <= t.hparams["learning_rate"] <= 1e-1
        assert t.features == ranges.features(t.hparams)
    # Uniform in log space: a third of the draws below 1e-3, half below 10**-2.5.
    rates = np.array([t.hparams["learning_rate"] for t in trials])
    assert np.mean(rates < 1e-3) == pytest.approx(1 / 3, abs=0.06)
    assert np.mean(rates < 10**-2.5) == pytest.approx(1 / 2, abs=0.06)


def test_a_linear_float_range_is_uniform():
    space = SearchSpace({"x": {"kind": "float", "low": 0, "high": 10}})
    xs = np.array([t.hparams["x"] for t in space.sample(1000, seed=0, bracket=0)])
    assert xs.min() >= 0 and xs.max() <= 10
    assert np.mean(xs < 5) == pytest.approx(0.5, abs=0.05)


def test_an_int_range_samples_as_its_value_list():
    """An all-discrete space keeps grid sampling without replacement, ranges expanded."""
    listed = SearchSpace({"batch_size": [20, 30, 40], "optimizer": ["adam", "sgd"]})
    ranged = SearchSpace({"batch_size": {"kind": "int", "low": 20, "high": 40, "step": 10},
                          "optimizer": {"kind": "choice", "values": ["adam", "sgd"]}})
    assert ranged.size == 6
    assert [t.hparams for t in ranged.sample(6, 1, 0)] == [
        t.hparams for t in listed.sample(6, 1, 0)]
    assert len(ranged.sample(10, 1, 0)) == 6


def test_a_discrete_space_too_large_for_a_grid_is_drawn_independently():
    space = SearchSpace({f"p{i}": {"kind": "int", "low": 0, "high": 10**6} for i in range(4)})
    assert space.size > GRID_LIMIT
    trials = space.sample(5, seed=0, bracket=0)
    assert len({tuple(t.hparams.values()) for t in trials}) == 5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "int", "low": 10, "high": 5}, "search_space.params.width: low=10 > high=5"),
        ({"kind": "float", "low": 0.5, "high": 0.1},
         "search_space.params.width: low=0.5 > high=0.1"),
        ({"kind": "float", "low": 0.1, "high": 0.1}, "search_space.params.width: low=high=0.1; "
         "a float range needs low < high (a fixed value is a one-value list, [0.1])"),
        ({"kind": "float", "low": 0, "high": 1, "log": True},
         "search_space.params.width: log=true needs low > 0, not low=0.0"),
        ({"kind": "float", "low": -1, "high": 1, "log": True},
         "search_space.params.width: log=true needs low > 0, not low=-1.0"),
        ({"kind": "float", "low": 1, "high": 2, "log": "yes"},
         "search_space.params.width: log='yes' must be true or false"),
        ({"kind": "range", "low": 1, "high": 2},
         "search_space.params.width: kind='range' is not one of choice, int, float"),
        ({"low": 1, "high": 2},
         "search_space.params.width: kind=None is not one of choice, int, float"),
        ({"kind": "int", "low": 1, "high": 9, "step": 0},
         "search_space.params.width: step=0 must be an integer >= 1"),
        ({"kind": "int", "low": 1, "high": 9, "step": -2},
         "search_space.params.width: step=-2 must be an integer >= 1"),
        ({"kind": "int", "low": 32, "high": 250, "step": 32},
         "search_space.params.width: high=250 is not low=32 plus a multiple of step=32; the "
         "last value would be 224, so write high=224"),
        ({"kind": "int", "low": 32}, "search_space.params.width: kind=int needs high"),
        ({"kind": "float"}, "search_space.params.width: kind=float needs low and high"),
        ({"kind": "int", "low": "a", "high": 9},
         "search_space.params.width: low='a' is not an integer"),
        ({"kind": "int", "low": 1.5, "high": 9},
         "search_space.params.width: low=1.5 is not an integer"),
        ({"kind": "float", "low": 0, "high": "big"},
         "search_space.params.width: high='big' is not a number"),
        ({"kind": "float", "low": 0, "high": float("inf")},
         "search_space.params.width: high=inf must be finite"),
        ({"kind": "int", "low": 1, "high": 9, "log": True},
         "search_space.params.width: 'log' is not a key of kind=int (it takes low, high, "
         "step)"),
        ({"kind": "choice", "values": []},
         "search_space.params.width=[]: needs a non-empty list of values"),
        ({"kind": "choice"}, "search_space.params.width: kind=choice needs values"),
        ([], "search_space.params.width=[]: needs a non-empty list of values"),
    ],
)
def test_bad_dimensions_are_one_line_naming_the_key(spec, message):
    with pytest.raises(ConfigError) as info:
        SearchSpace({"width": spec})
    assert str(info.value) == message


def test_only_choices_are_categorical():
    with pytest.raises(ConfigError, match=r"^search_space\.categorical: lr is a kind=float "
                                          r"range; only value lists are categorical$"):
        SearchSpace({"lr": {"kind": "float", "low": 0.1, "high": 1}}, categorical=["lr"])


def test_sampling_skips_what_the_search_drew_while_the_grid_has_other_configurations():
    space = SearchSpace({"a": list(range(6)), "b": ["x", "y"]})  # 12 configurations
    first = space.sample(5, seed=3, bracket=0)
    key = lambda h: (h["a"], h["b"])  # noqa: E731
    drawn = [t.hparams for t in first]
    second = space.sample(5, seed=3, bracket=1, drawn=drawn)
    assert not {key(t.hparams) for t in second} & set(map(key, drawn))
    assert len({key(t.hparams) for t in second}) == 5
    drawn += [t.hparams for t in second]
    # Two unused configurations left: both come first, then three of the used, no repeat.
    third = space.sample(5, seed=3, bracket=2, drawn=drawn)
    keys = [key(t.hparams) for t in third]
    assert len(set(keys)) == 5
    assert {k for k in keys if k not in set(map(key, drawn))} == (
        {key(h) for h in space} - set(map(key, drawn)))
    assert [t.hparams for t in space.sample(5, seed=3, bracket=2, drawn=drawn)] == [
        t.hparams for t in third]
    assert [t.hparams for t in space.sample(5, seed=3, bracket=2, drawn=drawn[::-1])] == [
        t.hparams for t in third], "the order drawn does not matter"
    assert len(space.sample(20, seed=3, bracket=3, drawn=drawn)) == 12


def test_unused_configurations_are_found_by_rank_as_listing_the_grid_would():
    from packexp.space import _unused_first

    rng = np.random.default_rng(0)
    for _ in range(200):
        size = int(rng.integers(1, 30))
        used = sorted(rng.choice(size, size=int(rng.integers(0, size + 1)), replace=False))
        used = [int(u) for u in used]
        picks = _unused_first(np.random.default_rng(1), size, used, size)
        unused = [i for i in range(size) if i not in used]
        assert sorted(picks[:len(unused)]) == unused
        assert sorted(picks) == list(range(size))


def test_a_configuration_outside_the_space_is_not_in_the_grid(table3):
    assert table3.grid_index(table3.first) == 0
    assert table3.grid_index({**table3.first, "batch_size": 21}) is None
    assert table3.grid_index({"batch_size": 20}) is None
    assert [table3.grid_index(h) for h in table3] == list(range(1056))


MINE = """\
params:
  batch_size: [20, 40]
  optimizer: [adam, sgd]
  learning_rate: {kind: float, low: 1.0e-4, high: 1.0e-1, log: true}
  activation: [relu, tanh]
categorical: [optimizer, activation]
"""


def test_a_search_space_file_needs_no_target(tmp_path):
    from packexp.config import check_search

    (tmp_path / "conf" / "search_space").mkdir(parents=True)
    (tmp_path / "conf" / "search_space" / "mine.yaml").write_text(MINE)
    cfg = compose_config([f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                          "search_space=mine"])
    assert "_target_" not in cfg.search_space
    space = check_search(cfg)[0]
    assert isinstance(space, SearchSpace)
    assert space.params == {"batch_size": (20, 40), "optimizer": ("adam", "sgd"),
                            "activation": ("relu", "tanh")}
    assert isinstance(space.dims["learning_rate"], FloatRange)
    assert space.categorical == {"optimizer", "activation"}


def test_a_search_space_without_params_says_what_to_write():
    from omegaconf import OmegaConf

    from packexp.config import check_search

    cfg = compose_config()
    cfg.search_space = OmegaConf.create({"batch_size": [20, 40], "optimizer": ["adam"]})
    with pytest.raises(ConfigError) as info:
        check_search(cfg)
    assert str(info.value) == ("search_space: no params (it has batch_size, optimizer); write "
                               "params: {name: [values], ...} as "
                               "conf/search_space/table3.yaml does")
