"""packexp's optimizer update against Keras's own apply."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from packexp.pack_options import OPTIMIZERS
from packexp.packing.optimizers import apply_gradients, make_optimizer, optimizer_kind

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


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_apply_gradients_is_keras_apply(name, graph):
    """Bit for bit, except Adam: its kernel rounds 1 - beta_1 in float32."""
    ours = run(make_optimizer(name, 0.01), apply_gradients, 5, graph)
    keras_own = run(make_optimizer(name, 0.01),
                    lambda o, g, v: o.apply(g, v), 5, graph)
    assert len(ours) == len(keras_own)
    for a, b in zip(ours, keras_own, strict=True):
        if name == "adam":
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(ours[0], run(make_optimizer(name, 0.01),
                                           lambda o, g, v: None, 5, graph)[0])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_table_describes_the_keras_optimizer(name):
    """Its update rule is its name's, and its slots are the state Keras keeps per weight."""
    optimizer = make_optimizer(name, 0.01)
    variables = [keras.Variable(np.zeros(s, np.float32)) for s in SHAPES]
    optimizer.build(variables)
    assert optimizer_kind(optimizer) == name
    slots = OPTIMIZERS[name].slots
    assert all(len(getattr(optimizer, a)) == len(SHAPES) for a in slots.values())
    per_weight = [v for v in optimizer.variables if v.shape in SHAPES]
    assert len(per_weight) == len(slots) * len(SHAPES)


def test_optimizers_with_extras_go_through_keras():
    clipped = keras.optimizers.Adam(learning_rate=0.01, clipnorm=0.1)
    assert optimizer_kind(clipped) is None
    ours = run(clipped, apply_gradients, 3, graph=True)
    keras_own = run(keras.optimizers.Adam(learning_rate=0.01, clipnorm=0.1),
                    lambda o, g, v: o.apply(g, v), 3, graph=True)
    for a, b in zip(ours, keras_own, strict=True):
        np.testing.assert_array_equal(a, b)
