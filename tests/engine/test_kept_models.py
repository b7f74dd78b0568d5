"""The models a search keeps (``keep_models``): the weights its reported scores came from, as
self-contained Keras files that take the rows as the user gave them. Plain Keras loading one
in a process of its own is tests/system/test_kept_models.py's."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from sklearn.datasets import load_digits

import packexp
from packexp.data import split
from packexp.errors import ConfigError
from packexp.packing.export import plain_network

pytestmark = pytest.mark.tf

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking
PLAIN = {"fusion": "off", "jit_compile": False}  # exact: plain packs, no XLA


def raw_validation(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The digits' validation rows as ``packexp.tune(data=(x, y))`` splits them, raw."""
    digits = load_digits()
    data = split("raw", digits.data, digits.target, 0.2, seed, num_classes=10)
    return data.x_val, data.y_val


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> packexp.SearchResult:
    digits = load_digits()
    return packexp.tune(data=(digits.data, digits.target), **QUICK, pack=PLAIN,
                        run_dir=tmp_path_factory.mktemp("plain") / "run")


def test_the_best_model_predicts_the_best_s_recorded_accuracy_from_raw_rows(plain):
    x_val, y_val = raw_validation()
    model = plain.best_model()
    probabilities = model.predict(x_val, verbose=0)
    assert probabilities.shape == (len(x_val), 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)
    # Plain packs: the same predictions, so exactly the recorded accuracy.
    assert (probabilities.argmax(axis=1) == y_val).mean() == plain.best["val_accuracy"]
    assert plain.best["model"] == f"models/{plain.best['trial_id']}.keras"
    assert plain.models == {plain.best["trial_id"]: {
        "file": plain.best["model"], "rung": plain.models[plain.best["trial_id"]]["rung"],
        "epochs": plain.best["epochs"]}}
    # Only the kept model is left: no kept state, no other trial's checkpoint.
    assert [p.name for p in (plain.run_dir / "models").iterdir()] == [
        f"{plain.best['trial_id']}.keras"]
    assert not any((plain.run_dir / "checkpoints").rglob("*.npz"))
    again = packexp.load(plain.run_dir)
    assert again.best["model"] == plain.best["model"]
    assert np.array_equal(again.best_model().predict(x_val, verbose=0), probabilities)
    with pytest.raises(KeyError, match="kept no model of it"):
        again.model("b9-t999")


def test_fused_packs_keep_a_model_within_float_rounding_of_its_score(tmp_path):
    digits = load_digits()
    fused = packexp.tune(data=(digits.data, digits.target), **QUICK, pack={"fusion": "on"},
                         run_dir=tmp_path / "run")
    assert any(p["fused"] for p in fused.results["packs"])
    x_val, y_val = raw_validation()
    accuracy = (fused.best_model().predict(x_val, verbose=0).argmax(axis=1) == y_val).mean()
    assert abs(accuracy - fused.best["val_accuracy"]) <= 1 / len(y_val)  # one row at most


def test_keep_models_keeps_the_top_k_best_first_or_none(tmp_path):
    digits = load_digits()
    data = (digits.data, digits.target)
    top = packexp.tune(data=data, **QUICK, pack=PLAIN, keep_models=3, run_dir=tmp_path / "top")
    best_of = {}
    for row in top.trials.itertuples():
        if row.val_accuracy == row.val_accuracy:  # scored
            best_of[row.trial_id] = max(best_of.get(row.trial_id, -1), row.val_accuracy)
    # The three best scores, best first (of two as good, the one scored at more epochs).
    assert [best_of[t] for t in top.models] == sorted(best_of.values(), reverse=True)[:3]
    assert next(iter(top.models)) == top.best["trial_id"]
    x_val, y_val = raw_validation()
    for trial_id, kept in top.models.items():
        rung = top.trials[(top.trials.trial_id == trial_id) & (top.trials.rung == kept["rung"])]
        accuracy = (top.model(trial_id).predict(x_val, verbose=0).argmax(1) == y_val).mean()
        assert accuracy == rung.val_accuracy.item() == best_of[trial_id]
    none = packexp.tune(data=data, **QUICK, pack=PLAIN, keep_models="none",
                        run_dir=tmp_path / "none")
    assert none.models == {} and "model" not in none.best
    assert not (none.run_dir / "models").exists()
    assert scores(none) == scores(top)  # keeping changes no result
    with pytest.raises(KeyError, match="not kept"):
        none.best_model()


def scores(result: packexp.SearchResult) -> list[tuple]:
    return [(r.trial_id, r.rung, r.val_accuracy) for r in result.trials.itertuples()]


@pytest.mark.parametrize("value", ["all", 0, -2, True])
def test_a_bad_keep_models_is_one_line_before_anything_trains(tmp_path, value):
    with pytest.raises(ConfigError, match="keep_models=") as caught:
        packexp.tune(**QUICK, keep_models=value, run_dir=tmp_path / "run")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_a_pareto_search_keeps_every_trial_of_its_front(tmp_path):
    result = packexp.tune(**QUICK, objective="pareto", pack=PLAIN,
                          overrides=["+search_space.params.width=[8,64]"],
                          run_dir=tmp_path / "run")
    front = result.best_trials
    assert front and {e["trial_id"] for e in front} == set(result.models)
    for entry in front:
        assert entry["model"] == result.models[entry["trial_id"]]["file"]
        assert result.model(entry["trial_id"]).count_params() >= entry["params"]
    # The model standing for the best: its own, or the front's best on the first goal.
    stands = max(front, key=lambda e: e["val_accuracy"])
    assert result.best_model().count_params() == result.model(stands["trial_id"]).count_params()


class Doubled(keras.layers.Layer):
    """A custom layer with a constructor argument and no ``get_config``: Keras cannot save it."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor


def doubled_mlp(input_shape, num_classes, hparams):
    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Dense(16, activation=hparams.get("activation", "relu"))(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(Doubled(2.0)(x)))


def test_a_model_keras_cannot_save_keeps_its_weights_and_says_so_in_one_line(tmp_path, capfd):
    result = packexp.tune(doubled_mlp, **QUICK, pack=PLAIN, run_dir=tmp_path / "run")
    [kept] = result.models.values()
    assert kept["file"].endswith(".weights.h5") and "Doubled" in kept["why"]
    assert (result.run_dir / kept["file"]).is_file()
    [line] = [x for x in capfd.readouterr().err.splitlines() if "cannot save" in x]
    assert "'doubled" in line and kept["file"] in line
    model = doubled_mlp((64,), 10, result.best["hparams"])
    model.load_weights(result.run_dir / kept["file"])  # the weights are whole
    x_val, y_val = raw_validation()  # built again from its builder: the model it scored as
    accuracy = (result.best_model().predict(x_val, verbose=0).argmax(1) == y_val).mean()
    assert accuracy == result.best["val_accuracy"]


def lambda_mlp(input_shape, num_classes, hparams):
    """A ``Lambda`` layer of a Python lambda: Keras saves the model, and its safe mode
    refuses to load the file."""
    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Dense(16, activation=hparams.get("activation", "relu"))(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(
        keras.layers.Lambda(lambda t: t * 2.0)(x)))


def test_a_model_keras_cannot_load_keeps_its_weights_and_is_built_again(tmp_path, capfd):
    """Each kept file is loaded back as it is written: one that Keras cannot load is kept as
    weights, said in one line, and nothing (results.json, the summary, MLflow) names a file
    that cannot be loaded; best_model() builds it again from the builder and them."""
    from mlflow.tracking import MlflowClient

    from packexp.runner.study import load

    store = tmp_path / "store"
    result = packexp.tune(lambda_mlp, **QUICK, pack=PLAIN, tracking="mlflow", verbose=True,
                          overrides=[f"tracking.store_dir={store}"], run_dir=tmp_path / "run")
    trial_id, file = result.best["trial_id"], result.best["model"]
    assert file == f"models/{trial_id}.weights.h5" == result.models[trial_id]["file"]
    assert "Lambda" in result.models[trial_id]["why"]
    assert [p.name for p in (result.run_dir / "models").iterdir()] == [f"{trial_id}.weights.h5"]
    out, err = capfd.readouterr()
    [line] = [x for x in err.splitlines() if "weights only" in x]
    assert file in line and "Lambda" in line and f"model('{trial_id}')" in line
    assert ".keras" not in out and "its weights only" in out  # the summary's best model
    assert "mlflow_model" not in result.results
    x_val, y_val = raw_validation()
    accuracy = (result.best_model().predict(x_val, verbose=0).argmax(1) == y_val).mean()
    assert accuracy == result.best["val_accuracy"]  # the weights it was scored with
    assert packexp.load(result.run_dir).best_model().count_params() > 0
    with pytest.raises(ValueError, match=r"only the weights.*model\.load_weights") as refused:
        load(result.run_dir).best_model()  # a result that cannot build it says how
    assert "\n" not in str(refused.value)
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    run = client.get_run(result.mlflow_run_id)
    assert [a.path for a in client.list_artifacts(run.info.run_id, "model_weights")] == [
        f"model_weights/{trial_id}.weights.h5"]
    assert not client.search_logged_models([run.info.experiment_id])  # no MLflow Model


def test_a_run_time_activation_becomes_the_keras_layer_it_selected():
    from packexp.models import mobilenet
    from packexp.models.activation import SelectActivation
    from packexp.packing.member import seed_keras

    seed_keras(3)
    model = mobilenet.build((32, 32, 1), 10, {"activation": "relu"}, alpha=0.35)
    assert any(isinstance(x, SelectActivation) for x in model._flatten_layers())
    plain = plain_network(model)
    assert not any(isinstance(x, SelectActivation) for x in plain._flatten_layers())
    x = np.random.default_rng(0).uniform(size=(4, 32, 32, 1)).astype(np.float32)
    assert np.array_equal(plain.predict(x, verbose=0), model.predict(x, verbose=0))
    saved = json.loads(plain.to_json())
    assert "SelectActivation" not in json.dumps(saved)


def test_a_regression_s_model_answers_in_the_target_s_units(tmp_path):
    from sklearn.datasets import load_diabetes

    from packexp.data import split_values

    x, y = load_diabetes(return_X_y=True)
    result = packexp.tune(data=(x, y), objective="regression", **QUICK, pack=PLAIN,
                          run_dir=tmp_path / "run")
    raw = split_values("raw", x, y.astype(np.float32), 0.2, 0)
    predicted = result.best_model().predict(raw.x_val, verbose=0)
    assert predicted.shape == (len(raw.x_val), 1)
    errors = predicted[:, 0].astype(np.float64) - raw.y_val
    best = result.trials[(result.trials.trial_id == result.best["trial_id"])
                         & (result.trials.epochs == result.best["epochs"])]
    assert np.mean(errors ** 2) == pytest.approx(best.val_mse.item(), rel=1e-4)
    assert np.mean(np.abs(errors)) == pytest.approx(best.val_mae.item(), rel=1e-4)
    assert 25 <= np.median(predicted) <= 346  # the targets' units, not standardised ones


def test_an_image_model_takes_uint8_images_as_given(tmp_path):
    digits = load_digits()
    images = (digits.images * (255 / 16)).round().astype(np.uint8)[..., None]
    result = packexp.tune(data=(images, digits.target), **QUICK, pack=PLAIN,
                          run_dir=tmp_path / "run")
    data = split("raw", images, digits.target, 0.2, 0, num_classes=10)
    model = result.best_model()
    assert model.get_layer("rescale") is not None
    accuracy = (model.predict(data.x_val, verbose=0).argmax(axis=1) == data.y_val).mean()
    assert accuracy == result.best["val_accuracy"]
