"""FLOPs per example of a Keras model, counted from its layers: what ``objective.metrics``'
``flops`` ranks by. A multiply-add is 2 FLOPs; the counted layers are those whose work grows
with their weights (Dense, the convolutions, including depthwise and separable ones, and
EinsumDense); elementwise layers (activations, BatchNormalization, pooling, additions) are
left out: for the models packexp trains they are a small share, and leaving them out keeps
the count a property of the architecture alone (``tests/engine/test_flops.py`` checks it
against hand counts)."""

from __future__ import annotations

import math
from typing import Any


def flops_per_example(model: Any) -> int:
    """The FLOPs one example's forward pass takes through ``model``'s counted layers."""
    return sum(_layer_flops(layer) for layer in _layers(model))


def _layers(model: Any) -> list[Any]:
    """Every layer of ``model``, nested models' included."""
    out = []
    for layer in model.layers:
        out += _layers(layer) if hasattr(layer, "layers") and layer.layers else [layer]
    return out


def _spatial(shape: Any) -> int:
    """The positions of one example's output: every axis but the batch and the channels."""
    return math.prod(int(d) for d in shape[1:-1])


def _layer_flops(layer: Any) -> int:
    import keras

    kind = type(layer)
    if isinstance(layer, keras.layers.Dense):
        units_in = int(layer.kernel.shape[0])
        rows = math.prod(int(d) for d in layer.output.shape[1:-1]) if len(
            layer.output.shape) > 2 else 1
        return 2 * units_in * layer.units * rows
    if isinstance(layer, keras.layers.DepthwiseConv2D | keras.layers.DepthwiseConv1D):
        kernel = layer.kernel.shape  # [*window, channels, multiplier]
        return 2 * math.prod(int(d) for d in kernel) * _spatial(layer.output.shape)
    if isinstance(layer, keras.layers.SeparableConv2D | keras.layers.SeparableConv1D):
        depthwise = math.prod(int(d) for d in layer.depthwise_kernel.shape)
        pointwise = math.prod(int(d) for d in layer.pointwise_kernel.shape)
        return 2 * (depthwise + pointwise) * _spatial(layer.output.shape)
    if isinstance(layer, keras.layers.Conv1D | keras.layers.Conv2D | keras.layers.Conv3D):
        kernel = layer.kernel.shape  # [*window, channels in / groups, filters]
        return 2 * math.prod(int(d) for d in kernel) * _spatial(layer.output.shape)
    if kind.__name__ == "EinsumDense":
        return 2 * math.prod(int(d) for d in layer.kernel.shape) * _spatial(layer.output.shape)
    return 0
