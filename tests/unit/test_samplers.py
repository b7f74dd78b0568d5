"""Samplers: random draws, and BOHB's TPE sampling through Optuna (pure Python)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from packexp.config import instantiate
from packexp.errors import ConfigError
from packexp.samplers import Observation, Sampler
from packexp.samplers.tpe import TpeSampler
from packexp.space import SearchSpace
from packexp.testing.config import CONF_DIR, compose_config

SPACE = SearchSpace({"optimizer": ["adam", "sgd", "adagrad", "momentum"],
                     "batch_size": {"kind": "int", "low": 20, "high": 70, "step": 5},
                     "learning_rate": {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True}},
                    categorical=["optimizer"])


def observations(good: str, epochs: float, n: int = 24) -> list[Observation]:
    """``n`` results at ``epochs`` where optimizer ``good`` scores 0.9 and the rest 0.2."""
    drawn = SPACE.sample(n, seed=99, bracket=int(epochs))
    return [Observation(dict(t.hparams), epochs, 0.9 if t.hparams["optimizer"] == good
                        else 0.2) for t in drawn]


def optimizers(trials) -> Counter:
    return Counter(t.hparams["optimizer"] for t in trials)


@pytest.mark.parametrize("name", sorted(p.stem for p in Path(CONF_DIR, "sampler").glob("*.yaml")))
def test_every_sampler_config_instantiates_to_a_sampler(name):
    sampler = instantiate(compose_config([f"sampler={name}"]).sampler, "sampler")
    assert isinstance(sampler, Sampler)
    trials = sampler.sample(SPACE, 5, 0, 2, [])
    assert [t.trial_id for t in trials] == [f"b2-t{i:03d}" for i in range(5)]


def test_without_enough_results_tpe_draws_as_random_does():
    few = observations("sgd", 1.0, n=3)  # min_points defaults to 3 + 1
    for history in ([], few):
        assert TpeSampler().sample(SPACE, 9, 0, 1, history) == SPACE.sample(9, 0, 1)


def test_tpe_draws_near_the_best_results_and_keeps_identities_and_seeds():
    drawn = TpeSampler(random_fraction=0.0).sample(SPACE, 30, 0, 1, observations("sgd", 1.0))
    assert optimizers(drawn)["sgd"] >= 20  # at random: about 30 / 4
    at_random = SPACE.sample(30, 0, 1)
    assert [(t.trial_id, t.seed, t.bracket) for t in drawn] == [
        (t.trial_id, t.seed, t.bracket) for t in at_random]
    for t in drawn:
        assert t.features == SPACE.features(t.hparams)
        assert type(t.hparams["batch_size"]) is int and t.hparams["batch_size"] % 5 == 0
        assert 20 <= t.hparams["batch_size"] <= 70
        assert type(t.hparams["learning_rate"]) is float
        assert 1e-4 <= t.hparams["learning_rate"] <= 1e-1


def test_tpe_fits_the_largest_budget_with_enough_results():
    history = observations("sgd", 1.0, n=30) + observations("adagrad", 9.0, n=8)
    drawn = TpeSampler(random_fraction=0.0, min_points=8).sample(SPACE, 30, 0, 0, history)
    assert optimizers(drawn).most_common(1)[0][0] == "adagrad"
    drawn = TpeSampler(random_fraction=0.0, min_points=9).sample(SPACE, 30, 0, 0, history)
    assert optimizers(drawn).most_common(1)[0][0] == "sgd"  # 9 epochs has too few


def test_tpe_is_deterministic_for_a_seed_and_keeps_its_random_share():
    history = observations("sgd", 1.0)
    tpe = TpeSampler(random_fraction=0.5)
    assert tpe.sample(SPACE, 20, 3, 1, history) == tpe.sample(SPACE, 20, 3, 1, history)
    assert tpe.sample(SPACE, 20, 3, 1, history) != tpe.sample(SPACE, 20, 4, 1, history)
    kept = sum(a == b for a, b in zip(tpe.sample(SPACE, 20, 3, 1, history),
                                      SPACE.sample(20, 3, 1), strict=True))
    assert 4 <= kept <= 16  # about half drawn at random, as the space draws them
    assert TpeSampler(random_fraction=1.0).sample(SPACE, 20, 3, 1, history) == SPACE.sample(
        20, 3, 1)


@pytest.mark.parametrize("key, value", [("random_fraction", 1.5), ("min_points", 1),
                                        ("min_points", True)])
def test_a_bad_tpe_setting_is_one_line_naming_the_key(key, value):
    cfg = compose_config(["sampler=tpe"])
    cfg.sampler[key] = value
    with pytest.raises(ConfigError, match=rf"^sampler\.{key}={value!r}: [^\n]*$"):
        instantiate(cfg.sampler, "sampler")
