"""packexp's optimizer update against Keras's own apply."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from packexp.data import digits
from packexp.optim import RULES, options_of
from packexp.packing import DeviceData, Pack
from packexp.packing.optimizers import (
    apply_gradients,
    make_optimizer,
    optimizer_args,
    optimizer_kind,
)
from packexp.packing.program import why_not_fused
from packexp.space.options import KERAS_ARGS, OPTIMIZERS, PackSettings
from packexp.testing.members import members

pytestmark = pytest.mark.tf

SHAPES = [(3, 4), (4,), (2, 3, 5)]


def run(optimizer: keras.optimizers.Optimizer, apply, steps: int, graph: bool) -> list:
    rng = np.random.default_rng(0)
    variables = [keras.Variable(rng.normal(size=s).astype(np.float32)) for s in SHAPES]
    optimizer.build(variables)
    grads = [[tf.constant(rng.normal(size=s).astype(np.float32)) for s in SHAPES]
             for _ in range(steps)]

    def step(gs):
        apply(optimizer, gs, variables)
        return tf.constant(0)

    fn = tf.function(step, autograph=False) if graph else step
    for gs in grads:
        fn(gs)
    return [v.numpy() for v in variables] + [v.numpy() for v in optimizer.variables]


@pytest.mark.parametrize("join", [True, False], ids=["joined", "weight-by-weight"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_apply_gradients_is_the_optimizers_own_apply(name, graph, join, monkeypatch):
    """The joined update of every weight at once (small models), and the one weight by
    weight (large ones), are the per-weight ``update_step``, bit for bit."""
    from packexp.packing import optimizers

    if not join:
        monkeypatch.setattr(optimizers, "JOIN_LIMIT", 0)
    ours = run(make_optimizer(name, 0.01), apply_gradients, 5, graph)
    keras_own = run(make_optimizer(name, 0.01),
                    lambda o, g, v: o.apply(g, v), 5, graph)
    assert len(ours) == len(keras_own)
    for a, b in zip(ours, keras_own, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(ours[0], run(make_optimizer(name, 0.01),
                                           lambda o, g, v: None, 5, graph)[0])


def weights(optimizer, apply, graph, steps=6) -> list:
    return run(optimizer, apply, steps, graph)[: len(SHAPES)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_is_its_keras_optimizer_bit_for_bit(name, graph):
    """Every module of packexp/optim against its Keras class with the same options, and with
    options of its own where it has some. One exception: traced, TensorFlow's graph optimizer
    rewrites Keras's Adagrad ``x / sqrt(a)`` into ``x * rsqrt(a)``, which may round one ulp
    apart; the general update's ``sqrt(a) + 0`` is left as written."""
    rule = RULES[name]
    for options in ({}, {k: v * 0.5 for k, v in rule.DEFAULTS.items()}):
        hparams = {"optimizer": name, **options}
        ours = weights(make_optimizer(name, 0.01, hparams), apply_gradients, graph)
        keras_class = getattr(keras.optimizers, rule.KERAS_CLASS)
        theirs = weights(keras_class(learning_rate=0.01, **options_of(name, hparams)),
                         lambda o, g, v: o.apply(g, v), graph)
        for a, b in zip(ours, theirs, strict=True):
            if name == "adagrad" and graph:
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
            else:
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_reconfigured_optimizer_is_a_fresh_one_of_its_new_rule(name):
    """Kept members take trials of any rule: configure, with fresh slots, is a new build."""
    other = next(r for r in sorted(RULES) if r != name)

    def reconfigure(optimizer, *_):
        if optimizer.rule != name:
            optimizer.configure(name, options_of(name), fresh=True)
        apply_gradients(optimizer, *_)

    ruled = run(make_optimizer(other, 0.01), reconfigure, 5, graph=False)
    fresh = run(make_optimizer(name, 0.01), apply_gradients, 5, graph=False)
    for a, b in zip(ruled, fresh, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_keras_arguments_known_without_tensorflow_are_keras_own():
    assert set().union(*map(optimizer_args, OPTIMIZERS)) == KERAS_ARGS


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_table_describes_the_optimizer(name):
    """Its update rule is its name's, and its slots are the state it keeps per weight."""
    optimizer = make_optimizer(name, 0.01)
    variables = [keras.Variable(np.zeros(s, np.float32)) for s in SHAPES]
    optimizer.build(variables)
    assert optimizer_kind(optimizer) == (name if OPTIMIZERS[name].fused else None)
    slots = OPTIMIZERS[name].slots
    size = sum(int(np.prod(s)) for s in SHAPES)
    if optimizer_kind(optimizer):  # joined: one vector per slot for these few weights
        assert all([v.shape for v in getattr(optimizer, a)] == [(size,)]
                   for a in slots.values())
        for kind in slots:
            values = optimizer.slot_values(kind, variables)
            assert [v.shape for v in values] == SHAPES
    else:
        assert all(len(getattr(optimizer, a)) == len(SHAPES) for a in slots.values())
        per_weight = [v for v in optimizer.variables if v.shape in SHAPES]
        assert len(per_weight) == len(slots) * len(SHAPES)


@pytest.mark.parametrize("limit", [0, 12, 100])
def test_weights_join_in_groups_under_the_limit(limit, monkeypatch):
    """Slots are one vector per group of consecutive weights of at most JOIN_LIMIT values,
    and the slot of each weight reads back what was set."""
    from packexp.packing import optimizers

    monkeypatch.setattr(optimizers, "JOIN_LIMIT", limit)
    assert optimizers.join_groups([12, 4, 30]) == {0: [[0], [1], [2]], 12: [[0], [1], [2]],
                                                   100: [[0, 1, 2]]}[limit]
    assert optimizers.join_groups([5, 5, 2, 9], 10) == [[0, 1], [2], [3]]
    optimizer = make_optimizer("adam", 0.01)
    variables = [keras.Variable(np.zeros(s, np.float32)) for s in SHAPES]
    optimizer.build(variables)
    values = [np.arange(np.prod(s), dtype=np.float32).reshape(s) + i
              for i, s in enumerate(SHAPES)]
    optimizer.set_slot_values("v", variables[::-1], values[::-1])
    for a, b in zip(optimizer.slot_values("v", variables), values, strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(not a.any() for a in optimizer.slot_values("m", variables))


def test_optimizers_with_extras_go_through_keras():
    clipped = keras.optimizers.Adam(learning_rate=0.01, clipnorm=0.1)
    assert optimizer_kind(clipped) is None
    ours = run(clipped, apply_gradients, 3, graph=True)
    keras_own = run(keras.optimizers.Adam(learning_rate=0.01, clipnorm=0.1),
                    lambda o, g, v: o.apply(g, v), 3, graph=True)
    for a, b in zip(ours, keras_own, strict=True):
        np.testing.assert_array_equal(a, b)


KERAS_ONLY = [n for n, spec in OPTIMIZERS.items() if not spec.fused]


def test_every_optimizer_trains_in_a_plain_pack_as_it_does_alone():
    """Keras's own optimizers, mixed with packexp's fused-rule ones in one plain pack: each
    member ends bit for bit as it does trained alone, weights and optimizer state."""
    data = DeviceData(digits.load())
    configs = [(i, (20 + 7 * i, name, 0.01, "relu"))
               for i, name in enumerate(["adam", *KERAS_ONLY])]
    packed = members(data, configs)
    pack = Pack(packed, data, PackSettings(fusion="auto", jit_compile=False, chunk_steps=50))
    assert not pack.fused  # no fused rule for most of them: the pack is plain
    pack.train({m.trial_id: m.steps_for(1.0) for m in packed})
    for m, config in zip(packed, configs, strict=True):
        [alone] = members(data, [config])
        Pack([alone], data, PackSettings(fusion="off", jit_compile=False, chunk_steps=50)).train(
            {alone.trial_id: alone.steps_for(1.0)})
        assert m.step == alone.step > 0
        for a, b in zip(m.model.get_weights(), alone.model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(m.optimizer.variables, alone.optimizer.variables, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_pack_with_an_optimizer_without_a_fused_rule_trains_plain():
    data = DeviceData(digits.load())
    ms = members(data, [(0, (20, "adam", 0.01, "relu")), (1, (20, "rmsprop", 0.01, "relu"))])
    assert why_not_fused(ms, "gather", "auto") == (
        "member t1: optimizer=rmsprop has no fused update rule")


@pytest.mark.parametrize("name", sorted(RULES))
def test_keras_fit_with_a_rule_optimizer_trains_as_its_keras_class(name):
    """A user's ``model.compile(optimizer=make_optimizer(...))`` (KerasTuner's comparison
    does this): Keras builds the optimizer symbolically inside its compiled train step,
    where assignments are dropped, so the initial coefficients and slots must come from
    initializers (they once stayed 0: SGD divided by 0, Adam's second slot started at the
    parameter count)."""
    from packexp.models import mlp3

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = rng.integers(0, 3, size=64)

    def fitted(optimizer) -> list[np.ndarray]:
        keras.utils.set_random_seed(0)
        model = mlp3.build((8,), 3, {"activation": "relu"}, width=16)
        model.compile(optimizer=optimizer, jit_compile=False,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        assert all(np.isfinite(history.history["loss"]))
        return model.get_weights()

    ours = fitted(make_optimizer(name, 0.01))
    theirs = fitted(getattr(keras.optimizers, RULES[name].KERAS_CLASS)(
        learning_rate=0.01, **options_of(name)))
    start = fitted(make_optimizer(name, 1e-30))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, s) for a, s in zip(ours, start, strict=True))
