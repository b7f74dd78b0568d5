"""dataset=mnist1d: made by the mnist1d package, seeded, kept, and never downloaded."""

from __future__ import annotations

import random

import numpy as np
import pytest

from packexp.config import instantiate
from packexp.data import mnist1d
from packexp.errors import ConfigError
from packexp.testing.config import compose_config


def test_gives_the_package_s_4000_and_1000_signals_of_40_points(tmp_path):
    data = mnist1d.load(cache_dir=str(tmp_path))
    assert data.x_train.shape == (4000, 40) and data.x_val.shape == (1000, 40)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
    assert data.num_classes == 10 and set(np.unique(data.y_train)) == set(range(10))
    assert abs(data.x_train.mean()) < 0.05 and abs(data.x_train.std() - 1) < 0.05


def test_is_made_once_and_read_back_by_later_runs(tmp_path, monkeypatch):
    made = mnist1d.load(num_samples=200, cache_dir=str(tmp_path), seed=4)
    assert len(list(tmp_path.glob("mnist1d-*.npz"))) == 1

    def refuse(*args):
        raise AssertionError("made again")

    monkeypatch.setattr(mnist1d, "_make", refuse)
    kept = mnist1d.load(num_samples=200, cache_dir=str(tmp_path), seed=4)
    for key in ("x_train", "y_train", "x_val", "y_val"):
        np.testing.assert_array_equal(getattr(kept, key), getattr(made, key))


def test_the_seed_makes_other_signals_and_null_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = (mnist1d.load(num_samples=200, cache_dir=None, seed=s) for s in (1, 2))
    assert not np.array_equal(a.x_train, b.x_train)
    assert list(tmp_path.iterdir()) == []


def test_leaves_the_global_random_state_and_downloads_nothing(tmp_path, monkeypatch):
    import requests

    def no_network(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(requests, "get", no_network)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    mnist1d.load(num_samples=200, cache_dir=None, seed=9)
    assert random.getstate() == python_state
    after = np.random.get_state()
    assert after[0] == numpy_state[0] and np.array_equal(after[1], numpy_state[1])


@pytest.mark.parametrize("key, value", [("num_samples", 10), ("num_samples", 1.5),
                                        ("train_split", 1.0)])
def test_a_bad_setting_is_one_line_naming_the_key(tmp_path, key, value):
    cfg = compose_config(["dataset=mnist1d", f"dataset.cache_dir={tmp_path}"])
    cfg.dataset[key] = value
    with pytest.raises(ConfigError, match=rf"^dataset\.{key}={value}: [^\n]*$"):
        instantiate(cfg.dataset, "dataset")
