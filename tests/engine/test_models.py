"""The model builders beyond the contract every model config keeps (test_conf_contracts.py):
logits, activation swapping, resizing, BatchNorm momentum, config, and mlp3's hyper-parameters."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hydra.utils import instantiate

from packexp.models import keras_apps, mlp3, needs_images
from packexp.models.activation import selectors
from packexp.models.mobilenet import build as build_mobilenet
from packexp.testing.config import compose_config
from packexp.testing.models import activation_counts, all_layers, bn_momenta

pytestmark = pytest.mark.tf

SMALL = {"alpha": 0.35}


def mobilenet(input_shape: list[int], activation: str = "relu") -> keras.Model:
    return build_mobilenet(input_shape, 3, {"activation": activation}, **SMALL)


def images(shape: list[int], batch: int = 2) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 255, size=[batch, *shape]).astype("float32")


def test_mobilenet_returns_logits_not_probabilities():
    model = mobilenet([32, 32, 3])
    assert model.layers[-1].get_config()["activation"] == "linear"
    logits = keras.ops.convert_to_numpy(model(images([32, 32, 3], batch=4)))
    assert logits.shape == (4, 3)
    assert not np.allclose(logits.sum(axis=1), 1.0)


def test_every_relu_becomes_a_runtime_activation_and_relu_keeps_relu6():
    """Each of MobileNetV2's ReLU6 layers is a SelectActivation: one structure for every
    activation; ``relu`` keeps the cap of 6, as keras.applications builds it."""
    original = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3),
                                              alpha=0.35, classes=3)
    relus = activation_counts(original)["ReLU"]
    for name in ("relu", "tanh"):
        model = mobilenet([32, 32, 3], name)
        assert activation_counts(model) == {}
        chosen = {layer.selected for layer in selectors(model)}
        assert (len(selectors(model)), chosen) == (relus, {name})
        assert {layer.relu_max_value for layer in selectors(model)} == {6.0}
    x = keras.ops.convert_to_tensor(np.linspace(-3, 9, 13, dtype="float32"))
    select = selectors(mobilenet([32, 32, 3], "relu"))[0]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(select(x)),
                                  np.clip(np.linspace(-3, 9, 13), 0, 6))
    assert keras_apps.RUNTIME_HPARAMS == ("activation",)


def test_activation_changes_the_outputs_under_one_seed():
    x = images([32, 32, 3])
    outputs = {}
    for activation in ("relu", "tanh"):
        keras.utils.set_random_seed(1)
        outputs[activation] = keras.ops.convert_to_numpy(mobilenet([32, 32, 3], activation)(x))
    assert not np.allclose(outputs["relu"], outputs["tanh"])


@pytest.mark.parametrize(("shape", "resized"), [([8, 8, 1], (32, 32)), ([8, 40, 3], (32, 40))])
def test_small_images_are_resized_inside_the_model(shape, resized):
    model = mobilenet(shape, "sigmoid")
    resizing = [layer for layer in all_layers(model) if isinstance(layer, keras.layers.Resizing)]
    assert [(r.height, r.width) for r in resizing] == [resized]
    assert tuple(model.input.shape) == (None, *shape)
    assert tuple(model(images(shape)).shape) == (2, 3)


def test_images_at_the_minimum_are_not_resized():
    model = mobilenet([32, 32, 3])
    assert not any(isinstance(layer, keras.layers.Resizing) for layer in all_layers(model))


def test_an_unknown_application_is_refused():
    with pytest.raises(ValueError, match=r"^application='ResNet51': not a keras.applications"):
        keras_apps.build([32, 32, 3], 3, {}, "ResNet51")


def test_mobilenet_config_instantiates_a_builder():
    cfg = compose_config(["model=mobilenet"])
    assert cfg.model.alpha == 0.35
    model = instantiate(cfg.model)([8, 8, 1], 3, {"activation": "tanh"})
    assert tuple(model(images([8, 8, 1])).shape) == (2, 3)
    assert bn_momenta(model) == {cfg.model.bn_momentum}


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_bn_momentum_reaches_every_batchnorm_layer_nested_too(activation):
    model = build_mobilenet([8, 8, 1], 3, {"activation": activation}, bn_momentum=0.5, **SMALL)
    assert bn_momenta(model) == {0.5}
    assert len([w for w in model.weights if w.path.endswith("moving_mean")]) == 52


def test_bn_momentum_null_keeps_the_keras_applications_value():
    assert bn_momenta(mobilenet([32, 32, 3])) == {0.999}


def test_bn_momentum_moves_the_statistics_evaluation_uses():
    """One training call moves a moving mean (from 0) by (1 - momentum) of the batch mean."""
    moved = {}
    for momentum in (0.999, 0.5):
        keras.utils.set_random_seed(3)
        model = build_mobilenet([32, 32, 3], 3, {"activation": "relu"}, bn_momentum=momentum,
                                **SMALL)
        model(images([32, 32, 3], batch=4), training=True)
        first = next(w for w in model.weights if w.path.endswith("moving_mean"))
        moved[momentum] = np.abs(keras.ops.convert_to_numpy(first)).mean()
    np.testing.assert_allclose(moved[0.5] / moved[0.999], 0.5 / 0.001, rtol=1e-3)


@pytest.mark.parametrize("momentum", [1.0, -0.1, "fast", True])
def test_a_bad_bn_momentum_is_refused_naming_the_key(momentum):
    with pytest.raises(ValueError, match=r"^bn_momentum=.*: must be a number in \[0, 1\) or null"):
        build_mobilenet([32, 32, 3], 3, {"activation": "relu"}, bn_momentum=momentum, **SMALL)


def test_mlp3_takes_feature_vectors():
    assert not needs_images(instantiate(compose_config(["model=mlp3"]).model))


def test_mlp3_takes_width_and_depth_from_hparams_over_its_settings():
    def units(model):
        return [layer.units for layer in model.layers if hasattr(layer, "units")]

    assert units(mlp3.build([64], 10, {"width": 8, "depth": 2}, width=64, depth=3)) == [8, 8, 10]
    assert units(mlp3.build([64], 10, {}, width=5)) == [5, 5, 5, 10]


@pytest.mark.parametrize("activation", mlp3.ACTIVATIONS)
def test_mlp3_with_its_activation_selected_computes_what_a_fixed_one_does(activation):
    """SelectActivation: one built mlp3 serves every activation, bit for bit, values and
    gradients, against the same model built with Keras's own activation."""
    import tensorflow as tf

    from packexp.models.activation import set_activation

    keras.utils.set_random_seed(3)
    selected = mlp3.build([6], 3, {"activation": "relu"})
    set_activation(selected, {"activation": activation})
    fixed = keras.Sequential([keras.Input((6,))] + [
        keras.layers.Dense(64, activation=activation) for _ in range(3)]
        + [keras.layers.Dense(3)])
    fixed.set_weights(selected.get_weights())
    x = tf.constant(np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32))
    outs = []
    for model in (selected, fixed):
        with tf.GradientTape() as tape:
            y = model(x)
            loss = tf.reduce_sum(y * y)
        outs.append([y, *tape.gradient(loss, model.trainable_variables)])
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("hparams", [{"width": 0}, {"depth": 1.5}, {"width": True}])
def test_mlp3_refuses_a_bad_width_or_depth_naming_it(hparams):
    [(key, value)] = hparams.items()
    with pytest.raises(ValueError, match=f"^{key}={value!r}: must be an integer >= 1"):
        mlp3.build([64], 10, hparams)


class Opaque(keras.layers.Layer):
    """A custom layer whose config cannot hold its argument (a function)."""

    def __init__(self, fn, **kwargs):
        super().__init__(**kwargs)
        self.fn = fn

    def call(self, x):
        return self.fn(x)


def test_a_layer_that_cannot_be_cloned_for_an_activation_is_named():
    inputs = keras.Input((4,))
    x = keras.layers.ReLU()(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, Opaque(lambda t: 2.0 * t, name="opaque")(x))
    with pytest.raises(ValueError, match=r"^activation='tanh': layer opaque \(Opaque\) cannot "
                                         r"be cloned from its config"):
        keras_apps.replace_activation(model, "tanh")
