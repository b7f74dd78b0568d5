"""Searches on sequences [n, steps, features]: a user's Conv1D builder on arrays in memory or in
a .npz, and dataset=mnist1d as sequences, against real Keras."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import packexp

pytestmark = pytest.mark.tf

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking, plain packs
SMALL_CNN1D = ["model.width=4", "model.blocks=2"]


def conv1d(input_shape, num_classes, hparams):
    """A user's 1-D builder: it takes [steps, features] only, as Keras's Conv1D does."""
    import keras

    inputs = keras.Input(input_shape)
    x = keras.layers.Conv1D(8, 5, activation=hparams["activation"])(inputs)
    x = keras.layers.MaxPooling1D()(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def digit_signals() -> tuple[np.ndarray, np.ndarray]:
    """The digits' 64 pixels as a signal of 64 steps of one feature, in float32."""
    digits = load_digits()
    return digits.data.astype(np.float32)[..., None], digits.target


def scores(result: packexp.SearchResult) -> list[tuple]:
    return [(r.trial_id, r.rung, r.epochs, r.val_accuracy, r.val_loss)
            for r in result.trials.itertuples()]


def test_tune_takes_sequences_and_a_conv1d_builder_and_keeps_a_model_of_the_rows(tmp_path):
    """The issue's call: ``tune(builder, (x[n, 64, 1], y))``; its kept model takes the rows
    as given (standardised inside) and scores on them what the search scored."""
    x, y = digit_signals()
    result = packexp.tune(conv1d, (x[:1500], y[:1500], x[1500:], y[1500:]), **QUICK,
                          run_dir=tmp_path / "run")
    assert result.results["dataset"] == "arrays"
    best = result.best
    assert best["val_accuracy"] > 0.5  # chance is 0.1
    model = result.best_model()
    assert tuple(model.input_shape) == (None, 64, 1)
    probabilities = model.predict(x[1500:], verbose=0)
    assert probabilities.shape == (297, 10)
    accuracy = float(np.mean(probabilities.argmax(axis=1) == y[1500:]))
    assert accuracy == pytest.approx(best["val_accuracy"], abs=1.5 / 297)


def test_sequences_from_a_npz_search_as_the_same_arrays_in_memory(tmp_path):
    x, y = digit_signals()
    np.savez(tmp_path / "signals.npz", x=x, y=y)
    memory = packexp.tune("cnn1d", (x, y), **QUICK, overrides=SMALL_CNN1D,
                          run_dir=tmp_path / "memory")
    file = packexp.tune("cnn1d", "arrays", **QUICK, overrides=SMALL_CNN1D,
                        dataset={"path": str(tmp_path / "signals.npz")},
                        run_dir=tmp_path / "file")
    assert scores(file) == scores(memory)
    assert file.best == memory.best


def test_mnist1d_as_sequences_is_a_key_away_and_cnn1d_scores_it_as_its_features(tmp_path):
    """``dataset.sequences=true`` gives [n, 40, 1]; cnn1d reads the 40 features as those steps,
    so both forms train the same network to the same scores."""
    settings = {**QUICK, "overrides": SMALL_CNN1D}
    data = {"num_samples": 600, "cache_dir": str(tmp_path / "data")}
    steps = packexp.tune("cnn1d", "mnist1d", dataset={**data, "sequences": True},
                         run_dir=tmp_path / "steps", **settings)
    flat = packexp.tune("cnn1d", "mnist1d", dataset=data, run_dir=tmp_path / "flat", **settings)
    assert tuple(steps.best_model().input_shape) == (None, 40, 1)
    assert tuple(flat.best_model().input_shape) == (None, 40)
    assert scores(steps) == scores(flat)
    assert steps.best["val_accuracy"] > 0.3  # chance is 0.1


def test_a_sequence_model_on_feature_vectors_is_refused_with_the_key_that_runs_it(tmp_path):
    """A user's Conv1D on mnist1d's 40 features: one line naming dataset.sequences=true,
    and with it the search runs; arrays of features get the expression that makes them
    sequences."""
    data = {"num_samples": 600, "cache_dir": str(tmp_path / "data")}
    with pytest.raises(packexp.ConfigError, match=r"^model: cannot build for mnist1d \[40\]: "
                       r".*expected min_ndim=3, found ndim=2.*; the model takes sequences "
                       r"\[steps, features\]: add dataset.sequences=true for \[40, 1\]$"):
        packexp.tune(conv1d, "mnist1d", dataset=data, **QUICK, run_dir=tmp_path / "flat")
    result = packexp.tune(conv1d, "mnist1d", dataset={**data, "sequences": True}, **QUICK,
                          run_dir=tmp_path / "steps")
    assert result.best["val_accuracy"] > 0.1
    x, y = digit_signals()
    with pytest.raises(packexp.ConfigError, match=r"give x as \[n, steps, features\] "
                                                  r"\(x\[\.\.\., None\] for one feature"):
        packexp.tune(conv1d, (x[..., 0], y), **QUICK, run_dir=tmp_path / "features")
