"""What every fused operation shares: the ``FusedOp`` base, the ``Context`` one call of the
fused graph takes, a weight stacked over the members (``Stacked``), and the checks that refuse
a layer (``Unfusable``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from packexp.packing.layout import IMAGE_RANK, VECTOR_RANK


class Unfusable(ValueError):
    """The members cannot train fused; the message says why."""


@dataclass
class Stacked:
    """One weight of every member as a variable ``[members, *shape]``.

    ``shape`` may differ from the member's own weight shape by unit axes (Dense biases are
    kept as ``[members, 1, out]`` so they broadcast over the batch).
    """

    variable: tf.Variable
    weights: list[keras.Variable]  # the members' own, in member order
    trainable: bool


@dataclass
class Context:
    """What one call of the fused graph needs beyond its input.

    The graph's state is passed in and out as tensors rather than read from and assigned
    to its variables, so a training loop can carry it from step to step with no stateful
    operation in the loop body.

    Attributes:
        members: How many members are fused.
        params: The value of each of ``FusedGraph.stacked``, in order.
        training: Training mode (batch statistics, moving-statistic updates).
        rows: ``[members, batch]`` float mask of each member's real rows when batch sizes
            differ (padded rows are left out of BatchNorm statistics); None when they agree.
        active: ``[members]`` bool, the members that take this step; others' BatchNorm
            statistics are left as they are.
        updates: Filled in training: index into ``params`` -> its new value (BatchNorm
            moving statistics).
    """

    members: int
    params: Sequence[tf.Tensor]
    training: bool = False
    rows: tf.Tensor | None = None
    active: tf.Tensor | None = None
    updates: dict[int, tf.Tensor] = field(default_factory=dict)

    def __getitem__(self, index: int | None) -> tf.Tensor | None:
        return None if index is None else self.params[index]


def tensor_rank(tensor: Any) -> int:
    return len(tensor.shape)


def input_rank(layer: keras.layers.Layer) -> int:
    return tensor_rank(layer.input)  # layers are called once (``_flat_layers`` checks)


def named(layer: keras.layers.Layer) -> str:
    """``name (Class)``: how reasons name a layer."""
    return f"{layer.name} ({type(layer).__name__})"


# Keras activations that mix elements, so a member's slice would see its pack-mates'.
NOT_ELEMENTWISE = ("softmax", "log_softmax", "glu", "sparsemax")


def check_activations(layers: Sequence[keras.layers.Layer]) -> None:
    """Fused activations act on all members' tensors at once: only Keras's own elementwise
    functions are known to leave each member's slice to itself."""
    for layer in layers:
        fn = getattr(layer, "activation", None)
        if fn is None:
            continue
        name = getattr(fn, "__name__", "")
        if name in NOT_ELEMENTWISE:
            raise Unfusable(f"layer {named(layer)}: activation {name} is not elementwise")
        if getattr(keras.activations, name, None) is not fn:
            raise Unfusable(f"layer {named(layer)}: activation {name or repr(fn)} is not one of "
                            "Keras's elementwise activations")


def _check_extras(layer: keras.layers.Layer) -> None:
    """What no fused operation reproduces: other dtypes, regularization losses (the fused
    loss is the cross-entropy alone) and weight constraints (the fused update leaves them
    out)."""
    dtype = layer.dtype_policy.compute_dtype
    weights = {str(w.dtype) for w in layer.weights}
    if dtype != "float32" or weights - {"float32"}:
        raise Unfusable(f"layer {named(layer)} computes in {dtype} with "
                        f"{sorted(weights) or 'no'} weights; fused packs are float32")
    regularizers = sorted(k for k, v in vars(layer).items()
                          if k.endswith("_regularizer") and v is not None)
    if regularizers:
        raise Unfusable(f"layer {named(layer)} has {', '.join(regularizers)}; the fused step "
                        "adds no regularization loss")
    constrained = [w.name for w in layer.weights if w.constraint is not None]
    if constrained:
        raise Unfusable(f"layer {named(layer)} constrains {', '.join(constrained)}; the fused "
                        "update applies no constraint")


class FusedOp:
    """The same layer of every member, computed as one operation."""

    #: per-member input ranks the operation accepts
    ranks: tuple[int, ...] = (IMAGE_RANK, VECTOR_RANK)

    def __init__(self, layers: Sequence[keras.layers.Layer]) -> None:
        self.layers = list(layers)
        self.layer = layers[0]
        if not isinstance(self.layer, keras.layers.Add | keras.layers.Concatenate):
            rank = input_rank(self.layer)
            if rank not in self.ranks:
                raise Unfusable(f"layer {named(self.layer)} on a rank-{rank} input has no "
                                "fused form")
        for layer in self.layers:
            _check_extras(layer)
        self.check()

    def check(self) -> None:
        """Raises Unfusable when the members' layers differ beyond what fusion allows."""
        shapes = {tuple(tuple(w.shape) for w in layer.weights) for layer in self.layers}
        if len(shapes) != 1:
            raise Unfusable(f"members' layer shapes differ ({named(self.layer)})")
        if any(layer.weights and not layer.trainable for layer in self.layers):
            raise Unfusable(f"layer {named(self.layer)} is frozen")
        configs = [layer_config(layer) for layer in self.layers]
        if any(c != configs[0] for c in configs[1:]):
            raise Unfusable(f"members' {named(self.layer)} layers are configured differently")

    def build(self, stack: Callable[..., int]) -> None:
        """Stacks the members' weights through ``stack(weights, shape=None)``, which returns
        the index of the stacked value in ``Context.params``."""

    def __call__(self, ctx: Context, x: Any) -> tf.Tensor:
        return self.layer.call(x)


def layer_config(layer: keras.layers.Layer) -> dict:
    """What members' layers must agree on: the configuration but for names, activations,
    the selected activation and trainability."""
    config = dict(layer.get_config())
    for key in ("name", "activation", "selected", "trainable"):
        config.pop(key, None)
    return config
