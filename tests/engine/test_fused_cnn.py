"""Fused CNNs: grouped convolutions and per-member BatchNorm over folded channels.

The fused CNN path is checked for correctness with ``fusion="on"``; ``auto`` fuses CNNs on
GPUs only, and the ``gpu`` tests check that choice where there is one. Every fused check
runs the per-member (split) convolutions, and the native grouped convolution wherever
TensorFlow can differentiate one here (``telemetry.grouped_conv_gradients``: GPUs, and CPUs
with oneDNN on).
"""

from __future__ import annotations

import functools
import logging
import os

import keras
import numpy as np
import pytest

from packexp import telemetry
from packexp.data import synthetic
from packexp.models import mobilenet
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.fused import grouped_conv_path
from packexp.packing.fused_graph import fused_ops
from packexp.packing.fused_ops import Unfusable
from packexp.packing.program import why_not_fused
from packexp.space.options import PackSettings
from packexp.testing.members import CONFIGS, trial
from packexp.testing.models import every_layer_cnn

pytestmark = pytest.mark.tf

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def images() -> DeviceData:
    return small_images()


def small_images() -> DeviceData:
    return DeviceData(synthetic.load(shape=[12, 12, 3], num_classes=4, train_size=96,
                                     val_size=40))


@pytest.fixture(params=["native", "split"])
def conv(request) -> str:
    """A grouped-convolution path: split everywhere, native where this device has it."""
    if request.param == "native" and not telemetry.grouped_conv_gradients():
        pytest.skip("TensorFlow cannot differentiate grouped convolutions here (oneDNN off)")
    return request.param


def cnn_members(data, configs, build=every_layer_cnn) -> list[Member]:
    ds = data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          data.train_size) for i, c in configs]


def train(data, configs, steps, fusion, build=every_layer_cnn, conv="auto"):
    ms = cnn_members(data, configs, build)
    pack = Pack(ms, data,
                PackSettings(fusion=fusion, jit_compile=False, chunk_steps=7, grouped_conv=conv))
    stats = pack.train({m.trial_id: steps for m in ms})
    if stats.fused and len(ms) > 1 and conv != "auto":  # conv is set for CNNs only
        assert stats.grouped_conv == grouped_conv_path(conv)
    return ms, pack.evaluate(), stats


def assert_close(a: Member, b: Member, rtol=RTOL, atol=ATOL, steps: int = 0) -> None:
    """Weights, BatchNorm statistics and optimizer slots agree.

    Adam turns a rounding difference in a near-zero gradient (a unit that a ReLU leaves
    nearly dead, say) into a step of either sign: up to about ``learning_rate`` per step.
    Given ``steps``, an Adam member may therefore differ by at most ``steps`` learning
    rates in a few weights (under 1% of them); every other weight meets the tolerance."""
    weights = list(zip(a.model.weights, b.model.weights, strict=True))
    if steps and a.trial.hparams["optimizer"] == "adam":
        reach = steps * float(a.trial.hparams["learning_rate"])
        off = total = 0
        for wa, wb in weights:
            x, y = wa.numpy(), wb.numpy()
            far = ~np.isclose(x, y, rtol=rtol, atol=atol)
            assert np.all(np.abs(x - y)[far] <= reach), wa.path
            off, total = off + int(far.sum()), total + x.size
        assert off <= 0.01 * total, f"{off} of {total} Adam weights differ"
        weights = []
    for wa, wb in weights:
        np.testing.assert_allclose(wa.numpy(), wb.numpy(), rtol=rtol, atol=atol, err_msg=wa.path)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_allclose(va.numpy(), vb.numpy(), rtol=rtol, atol=atol)


MIXED = list(enumerate(CONFIGS))  # four optimizers, activations, lrs and batch sizes
NO_ADAM = [c for c in MIXED if c[1][1] != "adam"]  # Adam: see test_fused.py


def train_alone(data, configs, steps, build=every_layer_cnn) -> list:
    """Each of ``configs`` trained plain and alone, as ``train`` returns it."""
    return [train(data, [config], steps, "off", build) for config in configs]


def assert_fused_matches_plain_alone(data, configs, steps, build=every_layer_cnn,
                                     conv="auto", rtol=RTOL, atol=ATOL, alone=None) -> None:
    """Each member of a fused pack ends as it does trained plain and alone (``alone``, from
    ``train_alone``, unless given): weights, BatchNorm statistics, slots and validation loss."""
    fused, fused_eval, stats = train(data, configs, steps, "on", build, conv)
    assert stats.fused
    alone = alone or train_alone(data, configs, steps, build)
    for m, ([plain], plain_eval, plain_stats) in zip(fused, alone, strict=True):
        assert not plain_stats.fused and m.step == plain.step == steps
        assert_close(m, plain, rtol, atol)
        assert fused_eval[m.trial_id].val_loss == pytest.approx(
            plain_eval[m.trial_id].val_loss, rel=10 * rtol)


def test_fused_cnn_matches_each_member_trained_plain_and_alone(images, conv):
    """Per-member BatchNorm, mixed batch sizes (padded rows kept out of the statistics),
    optimizers and activations: each fused member ends as it does trained plain alone."""
    assert_fused_matches_plain_alone(images, NO_ADAM, 15, conv=conv)


@pytest.mark.parametrize(("configs", "steps"),
                         [(NO_ADAM, 15), (MIXED, 3)])
def test_fused_cnn_members_do_not_depend_on_pack_mates(images, configs, steps, conv):
    """A grouped convolution's arithmetic depends on the group count (the library picks
    its algorithm per shape), so fused-in-a-pack and fused-alone agree to float32
    tolerance, not bit for bit; Adam amplifies that (see ``assert_close``), so it is
    checked over a few steps."""
    fused, _, _ = train(images, configs, steps, "on", conv=conv)
    for m, config in zip(fused, configs, strict=True):
        [alone], _, alone_stats = train(images, [config], steps, "on", conv=conv)
        assert alone_stats.fused
        assert_close(m, alone, steps=steps)


def test_split_grouped_convolutions_match_native_ones(images):
    """The fallback for devices without grouped-convolution gradients computes what the
    grouped convolution does, to float32 rounding (weights, statistics, slots, loss)."""
    if not telemetry.grouped_conv_gradients():
        pytest.skip("no native grouped-convolution gradients here to compare with")
    native, native_eval, _ = train(images, NO_ADAM, 15, "on", conv="native")
    split, split_eval, _ = train(images, NO_ADAM, 15, "on", conv="split")
    for a, b in zip(native, split, strict=True):
        assert_close(a, b)
        assert native_eval[a.trial_id].val_loss == pytest.approx(
            split_eval[b.trial_id].val_loss, rel=1e-4)


def test_auto_takes_the_native_path_only_where_the_probe_allows_it(monkeypatch):
    monkeypatch.setattr(telemetry, "grouped_conv_gradients", lambda: False)
    assert grouped_conv_path("auto") == "split"
    with pytest.raises(ValueError, match="grouped_conv=native"):
        grouped_conv_path("native")
    monkeypatch.setattr(telemetry, "grouped_conv_gradients", lambda: True)
    assert grouped_conv_path("auto") == "native"
    assert grouped_conv_path("split") == "split"
    with pytest.raises(ValueError, match="grouped_conv='grouped'"):
        grouped_conv_path("grouped")


def test_without_onednn_fused_cnns_train_on_the_split_path(images):
    """With oneDNN off (the suite's setting, tests/conftest.py, and TensorFlow's own default
    on some CPUs) the probe finds no grouped-convolution gradient, auto splits, and the fused
    pack trains and matches its members trained plain and alone."""
    if telemetry.gpu_device():
        pytest.skip("oneDNN is a CPU matter")
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0":
        pytest.skip("this run turned oneDNN on (TF_ENABLE_ONEDNN_OPTS)")
    assert telemetry.device_facts().onednn is False, telemetry.device_facts()
    assert not telemetry.grouped_conv_gradients()
    assert grouped_conv_path("auto") == "split"
    assert_fused_matches_plain_alone(images, NO_ADAM[:2], 4)


def test_a_finished_fused_cnn_member_keeps_its_batchnorm_statistics(images, conv):
    configs = MIXED[1:3]
    ms = cnn_members(images, configs)
    Pack(ms, images,
         PackSettings(fusion="on", jit_compile=False, chunk_steps=4, grouped_conv=conv)).train(
        {"t1": 3, "t2": 9})
    [alone] = cnn_members(images, configs[:1])
    Pack([alone], images, PackSettings(fusion="off", jit_compile=False)).train({"t1": 3})
    assert_close(ms[0], alone)


MOBILENET = functools.partial(mobilenet.build, alpha=0.35)
MOBILENET_CONFIGS = [(0, (20, "momentum", 1e-3, "relu")), (3, (32, "sgd", 1e-3, "leaky_relu"))]


@pytest.fixture(scope="module")
def mobilenets_alone(images) -> list:
    """The MobileNetV2 members trained plain and alone, once for both convolution paths."""
    return train_alone(images, MOBILENET_CONFIGS, 1, MOBILENET)


@pytest.mark.paper_cnns
def test_mobilenet_fuses_whole(images, conv, mobilenets_alone):
    """The real MobileNetV2: nested model, on-device resizing, ReLU6 layers in one member
    where the other has leaky-ReLU Activation layers, depthwise convolutions, residual adds.

    One step: on these tiny random images MobileNetV2 is chaotic, and plain training
    itself moves weights by 0.2 after two SGD steps at 0.1 from a 1e-6 perturbation of its
    initial weights; the small CNN above checks agreement over many steps. Even one step at
    lr 1e-2 moved one weight by 4e-4 (a channel of block 12's depthwise kernel, where
    BatchNorm normalises 2x2 maps) between kernels that round differently, so this step is
    at lr 1e-3, where that weight moved by 4e-5.
    """
    assert_fused_matches_plain_alone(images, MOBILENET_CONFIGS, 1, MOBILENET, conv,
                                     rtol=1e-3, atol=1e-4, alone=mobilenets_alone)


def test_a_vector_model_concatenating_its_input_evaluates_like_plain(images):
    def concat_input(input_shape, num_classes, hparams):
        x = keras.Input(input_shape)
        flat = keras.layers.Flatten()(x)
        h = keras.layers.Dense(8, activation=hparams["activation"])(flat)
        h = keras.layers.Concatenate()([flat, h])
        return keras.Model(x, keras.layers.Dense(num_classes)(h))

    assert_fused_matches_plain_alone(images, NO_ADAM, 5, concat_input)


def _functional(body):
    def build(input_shape, num_classes, hparams):
        x = keras.Input(input_shape)
        return keras.Model(x, body(keras.layers.Flatten()(x), num_classes))

    return build


def _shared(h, k):
    dense = keras.layers.Dense(h.shape[-1])
    return keras.layers.Dense(k)(dense(dense(h)))


def _frozen(h, k):
    layer = keras.layers.Dense(k)
    out = layer(h)
    layer.trainable = False
    return out


class ScaledDense(keras.layers.Dense):
    """A subclass of a layer with a fused form: its own call is not the parent's."""

    def call(self, inputs, training=None):
        return 2.0 * super().call(inputs)


class Block(keras.Model):
    """A subclassed model nested in a functional one."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)


def _custom_activation(x):
    return x / (1.0 + keras.ops.abs(x))


@pytest.mark.parametrize(("body", "reason"), [
    (lambda h, k: keras.layers.Dense(k)(h + 1.0), "is not a layer"),
    (lambda h, k: keras.layers.Dense(k)(keras.layers.Lambda(lambda t: 2.0 * t,
                                                            name="double")(h)),
     "layer double (Lambda) has no fused form"),
    (lambda h, k: ScaledDense(k, name="scaled")(h), "layer scaled (ScaledDense) has no fused"),
    (lambda h, k: Block(k, name="block")(h), "model block (Block) is not a single-input"),
    (lambda h, k: keras.layers.Dense(k, activation=_custom_activation, name="mine")(h),
     "layer mine (Dense): activation _custom_activation is not one of Keras's elementwise"),
    (lambda h, k: keras.layers.Dense(k, name="l2", kernel_regularizer="l2")(h),
     "layer l2 (Dense) has kernel_regularizer; the fused step adds no regularization loss"),
    (lambda h, k: keras.layers.Dense(k, name="act", activity_regularizer="l1")(h),
     "layer act (Dense) has activity_regularizer"),
    (lambda h, k: keras.layers.Dense(k, name="pos", kernel_constraint="non_neg")(h),
     "layer pos (Dense) constrains kernel; the fused update applies no constraint"),
    (lambda h, k: keras.layers.Dense(k, name="wide", dtype="float64")(h),
     "layer wide (Dense) computes in float64"),
    (lambda h, k: keras.layers.Dense(k)(keras.layers.GaussianNoise(0.1, name="noise")(h)),
     "layer noise (GaussianNoise) has no fused form"),
    (_shared, "called more than once"),
    (lambda h, k: keras.layers.Dense(k, activation="softmax")(h), "not elementwise"),
    (lambda h, k: keras.layers.Dense(k)(keras.layers.Activation("softmax")(h)),
     "not elementwise"),
    (_frozen, "frozen"),
    (lambda h, k: keras.layers.Dense(k)(keras.layers.Dropout(0.5, name="drop")(h)),
     "layer drop (Dropout) draws random masks (rate 0.5), which fused packs do not"),
    (lambda h, k: keras.layers.Dense(k)(keras.layers.LayerNormalization()(h)),
     "(LayerNormalization) has no fused form"),
])
@pytest.mark.filterwarnings("ignore:.*produced by a Softmax activation")
def test_what_has_no_fused_form_is_reported_before_tracing(images, body, reason):
    """Each reason names the layer; the pack falls back to plain and trains."""
    ms = cnn_members(images, MIXED[1:3], _functional(body))
    assert reason in why_not_fused(ms, "gather", "on")
    pack = Pack(ms, images, PackSettings(fusion="on", jit_compile=False))
    assert not pack.fused
    assert not pack.train({m.trial_id: 2 for m in ms}).fused
    assert all(m.step == 2 and np.isfinite(m.train_loss) for m in ms)


def test_several_outputs_do_not_fuse(images):
    def two_heads():
        x = keras.Input(images.dataset.input_shape)
        h = keras.layers.Flatten()(x)
        return keras.Model(x, [keras.layers.Dense(4)(h), keras.layers.Dense(4)(h)])

    with pytest.raises(Unfusable, match="several outputs"):
        fused_ops([two_heads(), two_heads()])


def test_under_auto_xla_fused_cnns_stay_uncompiled(images):
    ms = cnn_members(images, MIXED[1:3])
    stats = Pack(ms, images, PackSettings(fusion="on", jit_compile="auto")).train(
        {m.trial_id: 6 for m in ms})
    assert stats.fused and not stats.xla


@pytest.mark.skipif(telemetry.gpu_device() is not None, reason="checks the CPU choice")
def test_on_a_cpu_auto_leaves_cnns_unfused_and_says_so(images, caplog):
    ms = cnn_members(images, MIXED[:2])
    assert "GPU only" in why_not_fused(ms, "gather", "auto")
    assert why_not_fused(ms, "gather", "on") is None
    with caplog.at_level(logging.INFO, logger="packexp.packing.pack"):
        stats = Pack(ms, images, PackSettings(fusion="auto", jit_compile=False)).train(
            {m.trial_id: 2 for m in ms})
    assert not stats.fused
    assert "pack.fusion=on fuses it anyway" in caplog.text


def test_layers_without_a_fused_form_keep_the_pack_plain(images):
    def with_dropout(input_shape, num_classes, hparams):
        return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                 keras.layers.Dropout(0.5), keras.layers.Dense(num_classes)])

    ms = cnn_members(images, MIXED[:2], with_dropout)
    assert "Dropout" in why_not_fused(ms, "gather", "on")
    assert not Pack(ms, images, PackSettings(fusion="on")).fused


@pytest.mark.gpu
def test_on_a_gpu_auto_fuses_cnns_and_matches_plain(images):
    configs = NO_ADAM
    assert why_not_fused(cnn_members(images, configs), "gather", "auto") is None
    fused, _, stats = train(images, configs, 10, "auto")
    assert stats.fused
    for m, config in zip(fused, configs, strict=True):
        [plain], _, _ = train(images, [config], 10, "off")
        assert_close(m, plain, rtol=1e-3, atol=1e-4)  # cuDNN picks its own algorithms


@pytest.mark.gpu
def test_on_a_gpu_mobilenet_packs_fuse_by_default(images):
    build = functools.partial(mobilenet.build, alpha=0.35)
    ms = cnn_members(images, MIXED[:2], build)
    pack = Pack(ms, images, PackSettings(fusion="auto", jit_compile=False))
    assert pack.fused
    assert pack.train({m.trial_id: 2 for m in ms}).fused
