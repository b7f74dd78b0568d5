"""Sequences [n, steps, features]: a user's arrays and mnist1d's signals as 1-D models take them,
and every refused shape's hint an expression that, applied, gives arrays that are taken."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packexp.config import instantiate
from packexp.data import Scaling, mnist1d
from packexp.data.arrays import from_arrays, reshape_hint
from packexp.errors import ConfigError
from packexp.testing.config import compose_config

SOURCE = "packexp.tune(data=...)"


def make(x, y, x_val=None, y_val=None, **kwargs):
    return from_arrays(x, y, x_val, y_val, name="mine", source=SOURCE, **kwargs)


def signals(n: int = 40, steps: int = 16, features: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(loc=[5.0, -2.0, 0.0], scale=[3.0, 0.5, 1.0], size=(n, steps, features))
    return x, np.arange(n) % 4


def test_float_sequences_are_taken_and_each_feature_standardised_over_examples_and_steps():
    x, y = signals()
    data = make(x, y, x[:8], y[:8])
    assert data.input_shape == (16, 3)
    assert data.x_train.dtype == data.x_val.dtype == np.float32
    scaling = Scaling.fitted(x.reshape(-1, 3))  # one mean and std per feature, every step
    assert data.inputs.mean.shape == data.inputs.std.shape == (3,)
    np.testing.assert_array_equal(data.inputs.mean, scaling.mean)
    np.testing.assert_array_equal(data.x_train, scaling(x))
    np.testing.assert_array_equal(data.x_val, scaling(x[:8]))
    np.testing.assert_allclose(data.x_train.reshape(-1, 3).mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(data.x_train.reshape(-1, 3).std(axis=0), 1, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16])
def test_sequences_of_any_number_type_are_float32_and_unscaled_without_standardize(dtype):
    x, y = signals()
    given = (x * 10).astype(dtype)
    data = make(given, y, standardize=False, val_fraction=0.25)
    assert data.x_train.dtype == np.float32 and data.inputs is None
    assert data.x_train.shape == (30, 16, 3) and data.x_val.shape == (10, 16, 3)
    both = np.concatenate([data.x_train, data.x_val])  # the rows as given, split
    np.testing.assert_array_equal(np.sort(both, axis=0), np.sort(given.astype(np.float32), axis=0))


def test_a_regression_takes_sequences():
    x, _ = signals()
    data = make(x, x[:, :, 0].sum(axis=1), regression=True)
    assert data.regression and data.x_train.shape[1:] == (16, 3)


def test_a_sequence_s_non_finite_value_names_its_row_step_and_feature():
    x, y = signals()
    x[5, 7, 2] = np.inf
    with pytest.raises(ConfigError, match=rf"^{re.escape(SOURCE)}: x has inf at row 5, step 7, "
                                          r"feature 2; [^\n]*$"):
        make(x, y)


def test_validation_sequences_of_other_steps_are_refused_naming_both_shapes():
    x, y = signals()
    with pytest.raises(ConfigError, match=r"x_val has shape \(4, 15, 3\) and x \(40, 16, 3\)"):
        make(x, y, x[:4, :15], y[:4])


# Each shape refused, the expression its line must give, and that expression applied.
REFUSED = [
    pytest.param(np.ones(12), "x[:, None]", id="one_axis"),
    pytest.param(np.ones((12, 8, 8), np.uint8), "x[..., None]", id="uint8_without_channels"),
    pytest.param(np.ones((12, 8, 8), np.uint8), "x.astype(np.float32)",
                 id="uint8_as_sequences"),
    pytest.param(np.full((12, 8, 8, 3), 0.5), "(x * 255).round().astype(np.uint8)",
                 id="float_images"),
    pytest.param(np.full((12, 8, 8, 3), 7, np.int64), "x.astype(np.uint8)", id="int_images"),
    # The second refusal: a channel axis added to sequences [n, 64, 1].
    pytest.param(np.ones((12, 64, 1, 1), np.float32), "x[..., 0]", id="sequences_with_an_axis"),
    pytest.param(np.ones((12, 2, 3, 4, 5)), "x.reshape(len(x), -1)", id="five_axes"),
]


@pytest.mark.parametrize(("x", "expression"), REFUSED)
def test_a_refused_shape_s_line_names_a_fix_that_is_then_taken(x, expression):
    y = np.arange(len(x)) % 2
    with pytest.raises(ConfigError) as info:
        make(x, y)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{SOURCE}: x has shape {x.shape} and dtype ")
    assert "must be [n, features] numbers, [n, steps, features] sequences" in line
    assert expression in line
    fixed = eval(expression, {"np": np, "x": x})  # the line's own fix
    data = make(fixed, y, val_fraction=0.5)
    assert data.train_size + data.val_size == len(x)


def test_a_hint_names_the_array_refused():
    assert "x_val[..., None]" in reshape_hint((3, 8, 8), np.uint8, "x_val")
    assert "x_val[..., 0]" in reshape_hint((3, 8, 1, 1), np.float32, "x_val")


def test_mnist1d_as_sequences_is_its_signals_with_one_feature_per_step(tmp_path):
    flat = mnist1d.load(num_samples=200, cache_dir=str(tmp_path))
    steps = mnist1d.load(num_samples=200, cache_dir=str(tmp_path), sequences=True)
    assert flat.input_shape == (40,) and steps.input_shape == (40, 1)
    np.testing.assert_array_equal(steps.x_train[..., 0], flat.x_train)
    np.testing.assert_array_equal(steps.x_val[..., 0], flat.x_val)
    np.testing.assert_array_equal(steps.y_train, flat.y_train)
    assert steps.x_train.dtype == np.float32
    assert len(list(tmp_path.glob("mnist1d-*.npz"))) == 1  # one kept file serves both


def test_mnist1d_sequences_are_a_key_away_and_a_bad_value_is_one_line(tmp_path):
    cfg = compose_config(["dataset=mnist1d", f"dataset.cache_dir={tmp_path}",
                          "dataset.num_samples=200", "dataset.sequences=true"])
    assert instantiate(cfg.dataset, "dataset").input_shape == (40, 1)
    cfg.dataset.sequences = "yes"
    with pytest.raises(ConfigError, match=r"^dataset\.sequences='yes': must be true or false$"):
        instantiate(cfg.dataset, "dataset")


def test_an_mnist1d_run_journaled_before_sequences_resumes_and_asking_them_is_refused(tmp_path):
    """A journal of the release before ``dataset.sequences`` lacks the key: it ran on 40
    features, which a resume now composes as ``false``."""
    from packexp.runner.journal import Journal
    from packexp.runner.replay import Recorded

    old = {"seed": 0, "dataset._target_": "packexp.data.mnist1d.load"}
    Journal(tmp_path).append("start", config=old, overrides=[])
    now = {**old, "dataset.sequences": False}
    assert Recorded.read(tmp_path).to_continue(now, resume=True)[0]["config"] == old
    with pytest.raises(ConfigError, match=r"dataset\.sequences=True here, but the journal has "
                                          r"dataset\.sequences=False"):
        Recorded.read(tmp_path).to_continue({**old, "dataset.sequences": True}, resume=True)
