"""Narrow stand-ins (``models.stand_in``): every built-in model and a user's own narrowed with
the input and the readout kept, a layer that cannot be narrowed named in one line, muP's
coordinate check, and plain packs of stand-ins exactly as each trained alone."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from packexp.models import cnn, cnn1d, mlp3, mobilenet
from packexp.models.narrowed import Narrowed
from packexp.models.stand_in import MuReadout, stand_in_of
from packexp.packing import Member, Pack
from packexp.packing.optimizers import apply_gradients, make_optimizer
from packexp.space.options import PackSettings
from packexp.surrogate import SCALE_KEY
from packexp.testing.members import CONFIGS, PLAIN, assert_same_weights, trial

pytestmark = pytest.mark.tf


def shapes(model: keras.Model) -> list[tuple[int, ...]]:
    return [tuple(v.shape) for v in model.trainable_variables]


def own_model(input_shape, num_classes, hparams):
    """A user's functional model on sequences: Conv1D, BatchNorm, attention, a wide Dense."""
    x = inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Conv1D(32, 3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.Add()([x, keras.layers.MultiHeadAttention(2, 16)(x, x)])
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="own")


@pytest.mark.parametrize(("build", "input_shape", "widths"), [
    (functools.partial(mlp3.build, width=64), [12], {"dense": (64, 16)}),
    (functools.partial(cnn.build, width=16, blocks=2), [8, 8, 1], {"conv2d": (16, 4)}),
    (functools.partial(cnn1d.build, width=16, blocks=2), [40, 1], {"conv1d": (16, 4)}),
    (own_model, [10, 3], {"conv1d": (32, 8), "dense": (256, 64)}),
])
def test_hidden_widths_are_divided_and_the_input_and_readout_kept(build, input_shape, widths):
    hp = {"activation": "relu"}
    full = Narrowed(build, 4)(input_shape, 5, {**hp, SCALE_KEY: 1})
    narrow = Narrowed(build, 4)(input_shape, 5, hp)
    assert stand_in_of(full) is None and stand_in_of(narrow).scale == 4
    assert not any(isinstance(layer, MuReadout) for layer in full.layers)
    readout = narrow.layers[-1]
    assert isinstance(readout, MuReadout) and readout.units == 5
    assert readout.input_multiplier == pytest.approx(4.0)
    (first_full, *_), (first, *_) = shapes(full), shapes(narrow)
    assert first[:-1] == first_full[:-1]  # the input's side of the first kernel kept
    for name, (wide, thin) in widths.items():
        layer = next(lay for lay in narrow.layers if lay.name.startswith(name))
        twin = next(lay for lay in full.layers if lay.name.startswith(name))
        assert (twin.kernel.shape[-1], layer.kernel.shape[-1]) == (wide, thin)
    assert narrow.count_params() < full.count_params() / 3
    out = narrow(np.zeros([2, *input_shape], np.float32))
    assert tuple(out.shape) == (2, 5)


@pytest.mark.parametrize("image", [[32, 32, 3], [8, 8, 1]])  # digits': resized in a wrapper
def test_mobilenet_narrows_by_its_alpha(image):
    build = functools.partial(mobilenet.build, alpha=0.5)
    full = Narrowed(build, 2)(image, 10, {"activation": "relu", SCALE_KEY: 1})
    narrow = Narrowed(build, 2)(image, 10, {"activation": "relu"})
    assert shapes(narrow)[0][-1] < shapes(full)[0][-1] or shapes(narrow)[1][-1] < shapes(
        full)[1][-1]
    assert stand_in_of(narrow).scale == 2
    readouts = [layer for layer in narrow._flatten_layers(include_self=False)
                if isinstance(layer, MuReadout)]
    assert len(readouts) == 1  # its fan-in, MobileNetV2's 1280 features, is no width
    assert narrow(np.zeros([1, *image], np.float32)).shape == (1, 10)


def test_a_layer_that_cannot_be_narrowed_is_named_in_one_line():
    def residual_on_input(input_shape, num_classes, hparams):
        x = keras.Input(tuple(input_shape))
        h = keras.layers.Dense(input_shape[0], name="same_width")(x)
        return keras.Model(x, keras.layers.Dense(num_classes)(keras.layers.Add(name="sum")([x, h])))

    with pytest.raises(ValueError, match=r"surrogate\.scale=4: the stand-in cannot be built at "
                                         "layer sum") as e:
        Narrowed(residual_on_input, 4)([16], 3, {})
    assert "\n" not in str(e.value)


def hidden_outputs(model: keras.Model, x: np.ndarray) -> list[np.ndarray]:
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)][:-1]
    return [np.asarray(a) for a in keras.Model(model.inputs, [d.output for d in dense])(x)]


def trained(model: keras.Model, optimizer: str, lr: float, x, y, steps: int = 6) -> keras.Model:
    """``model`` after ``steps`` steps of packexp's update (``apply_gradients``, the plain
    pack's), with its stand-in's rates."""
    stand_in = stand_in_of(model)
    opt = make_optimizer(optimizer, lr, {"optimizer": optimizer})
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        variables = model.trainable_variables
        apply_gradients(opt, tape.gradient(value, variables), variables,
                        stand_in.rates if stand_in else None)
    return model


def change(model: keras.Model, optimizer: str, lr: float, x, y) -> list[float]:
    """Each hidden layer's mean |change| of its output over a few steps."""
    before = hidden_outputs(model, x)
    after = hidden_outputs(trained(model, optimizer, lr, x, y), x)
    return [float(np.mean(np.abs(a - b))) for a, b in zip(after, before, strict=True)]


@pytest.mark.parametrize(("optimizer", "lr"), [("adam", 0.01), ("sgd", 0.5)])
def test_coordinate_check_updates_stay_flat_across_widths_under_the_stand_in_rules(
        optimizer, lr):
    """muP's coordinate check (mup's ``coord_check``): over a few steps each hidden layer's
    output moves by the same mean amount, within 1.5x, at widths 1/8 to 1 of the base under
    the stand-in parametrisation; a model built at each width in the standard one (Keras's
    own) moves by more than 2x more at one width than another in some layer (with Adam the
    middle layer's grows with width, with SGD every layer's shrinks). Means of 3 seeds."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 20)).astype(np.float32)
    y = rng.integers(0, 5, 64).astype(np.int32)
    mup, standard = [], []
    for scale in (8, 4, 2, 1):
        ours, theirs = [], []
        for seed in range(3):
            keras.utils.set_random_seed(seed)
            model = Narrowed(functools.partial(mlp3.build, width=512), scale)(
                [20], 5, {"activation": "relu", SCALE_KEY: scale})
            ours.append(change(model, optimizer, lr, x, y))
            keras.utils.set_random_seed(seed)
            plain = mlp3.build([20], 5, {"activation": "relu"}, width=512 // scale)
            theirs.append(change(plain, optimizer, lr, x, y))
        mup.append(np.mean(ours, axis=0))
        standard.append(np.mean(theirs, axis=0))
    mup, standard = np.array(mup), np.array(standard)  # [width, layer]
    assert (mup.max(axis=0) / mup.min(axis=0)).max() <= 1.5, mup
    assert (standard.max(axis=0) / standard.min(axis=0)).max() > 2.0, standard
    if optimizer == "adam":
        assert standard[-1, 1] > 2.0 * standard[0, 1], standard  # grows with width


def pack_of(configs, settings: dict, scale: int = 4) -> tuple[list[Member], dict]:
    from packexp.testing.data import device, features

    data = device(features())
    build = Narrowed(functools.partial(mlp3.build, width=64), scale)
    ds = data.dataset
    ms = [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes, data.train_size)
          for i, c in configs]
    pack = Pack(ms, data, PackSettings(**{**PLAIN, **settings}))
    pack.train({m.trial_id: m.steps_for(2) for m in ms})
    return ms, pack.evaluate()


@pytest.mark.parametrize("loop", ["auto", "off"])  # one looped program; the members side by side
def test_a_plain_pack_of_stand_ins_equals_each_trained_alone_bit_for_bit(loop):
    configs = list(enumerate(CONFIGS))
    packed, packed_eval = pack_of(configs, {"loop": loop})
    for m in packed:
        i = int(m.trial_id[1:])
        [alone], alone_eval = pack_of([(i, CONFIGS[i])], {"loop": loop})
        assert_same_weights(alone, m)
        assert alone_eval[m.trial_id] == packed_eval[m.trial_id]


def test_the_stand_in_rules_change_how_it_trains():
    [ruled], _ = pack_of([(0, CONFIGS[0])], {})
    [unruled], _ = pack_of([(0, CONFIGS[0])], {}, scale=1)
    assert stand_in_of(ruled.model) and not stand_in_of(unruled.model)
    assert shapes(ruled.model) != shapes(unruled.model)



def own_model_on_rows(input_shape, num_classes, hparams):
    """``own_model`` on 2-D rows (digits' 64 features read as 16 steps of 4)."""
    x = inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Reshape((16, 4))(x)
    x = keras.layers.Conv1D(32, 3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.Add()([x, keras.layers.MultiHeadAttention(2, 16)(x, x)])
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="own")


@pytest.mark.slow
def test_the_handed_over_model_is_the_full_width_one_and_reproduces_its_score(tmp_path):
    """``packexp.tune`` over stand-ins of a user's functional model (Conv1D, BatchNorm,
    attention, a wide Dense): its best model is the full-width one, and its predictions on the
    validation rows score what the search recorded for it."""
    import packexp
    from packexp.data import digits

    data = digits.load(seed=0)
    result = packexp.tune(own_model_on_rows, (data.x_train, data.y_train, data.x_val,
                                              data.y_val),
                          experiment="quick", surrogate={"scale": 4, "transfer": 2},
                          run_dir=tmp_path)
    best = result.best
    assert best["trial_id"].startswith("full-")
    assert len(result.results["transfer"]["trials"]) == 2
    model = result.best_model()
    full = own_model_on_rows(data.x_train.shape[1:], 10, best["hparams"])
    assert shapes(model) == shapes(full)  # the full width, not the stand-in's
    accuracy = (model.predict(data.x_val, verbose=0).argmax(1) == data.y_val).mean()
    assert accuracy == pytest.approx(best["val_accuracy"], abs=1e-6)
    refit = packexp.refit(result.run_dir)
    assert shapes(refit) == shapes(full)  # refit trains the full width too


def test_a_search_over_stand_ins_keeps_its_own_calibration():
    """The cost model's calibration measures the stand-in under ``surrogate.scale``: its
    facts (and so the kept file's key) are not the full model's, and at scale 1 they are
    what every run had before stand-ins, so kept calibrations still hold."""
    from packexp.config.components import Components
    from packexp.config.targets import fit_dataset_to_model
    from packexp.strategies.calibration import calibration_key
    from packexp.telemetry import device_facts
    from packexp.testing.config import compose_config

    def facts(*overrides: str) -> dict:
        cfg = compose_config(["experiment=quick", *overrides])
        fit_dataset_to_model(cfg)
        return Components.build(cfg, probe=False).calibration_facts(device_facts())

    full, narrow = facts(), facts("surrogate.scale=4")
    assert "surrogate_scale" not in full and narrow == {**full, "surrogate_scale": 4}
    assert calibration_key(narrow) != calibration_key(full)
