"""Narrow stand-ins of any model (``surrogate.scale``): every hidden width divided, the input
and the readout kept, parametrised after muP with the full model as the base shape
(``packexp.surrogate.rules``): each weight's learning-rate multipliers, the readout's input
multiplier and the initial scales. At scale 1 the builder's own model, untouched."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from packexp.surrogate.rules import (
    adaptive_rate,
    init_factor,
    narrowed,
    readout_multiplier,
    role,
    sgd_rate,
)

# Each layer class whose width packexp divides, and its config keys that are widths.
WIDTHS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (keras.layers.Dense, ("units",)),
    (keras.layers.EinsumDense, ()),  # refused: its output shape is the user's (below)
    (keras.layers.Conv1D, ("filters",)), (keras.layers.Conv2D, ("filters",)),
    (keras.layers.Conv3D, ("filters",)), (keras.layers.SeparableConv1D, ("filters",)),
    (keras.layers.SeparableConv2D, ("filters",)),
    (keras.layers.Conv1DTranspose, ("filters",)), (keras.layers.Conv2DTranspose, ("filters",)),
    (keras.layers.Embedding, ("output_dim",)),
    (keras.layers.MultiHeadAttention, ("key_dim", "value_dim")),
    (keras.layers.LSTM, ("units",)), (keras.layers.GRU, ("units",)),
    (keras.layers.SimpleRNN, ("units",)),
)
# Layers with weights whose width follows their input's: cloned as they are.
FOLLOWERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
             keras.layers.GroupNormalization, keras.layers.DepthwiseConv1D,
             keras.layers.DepthwiseConv2D, keras.layers.UnitNormalization)
# A weight's variable name -> its initialiser's attribute on the layer (Keras's names).
INITIALIZERS = {"kernel": "kernel_initializer", "depthwise_kernel": "depthwise_initializer",
                "pointwise_kernel": "pointwise_initializer",
                "embeddings": "embeddings_initializer"}


@keras.saving.register_keras_serializable(package="packexp")
class MuReadout(keras.layers.Dense):
    """A readout (``mup``'s ``MuReadout``): a Dense layer whose input is multiplied by
    ``input_multiplier`` (``1 / width_mult``: the stand-in's ``S``)."""

    def __init__(self, units: int, input_multiplier: float = 1.0, **kwargs: Any) -> None:
        super().__init__(units, **kwargs)
        self.input_multiplier = float(input_multiplier)

    def call(self, inputs, training=None):
        return super().call(inputs * self.input_multiplier, training=training)

    def get_config(self) -> dict:
        return {**super().get_config(), "input_multiplier": self.input_multiplier}


@dataclass(frozen=True)
class StandIn:
    """What makes a built model a stand-in: its scale and, for each of its trainable
    variables in order, the learning-rate multiplier under an Adam-like rule and under an
    SGD-like one (``packing.optimizers.apply_gradients`` applies them)."""

    scale: int
    rates: tuple[tuple[float, float], ...]


def stand_in_of(model: keras.Model) -> StandIn | None:
    """The model's ``StandIn``; None for a model trained as it is."""
    return getattr(model, "_packexp_stand_in", None)


def stand_in(build: Callable[..., keras.Model], input_shape: Sequence[int], num_classes: int,
             hparams: Mapping[str, Any], scale: int,
             readout_zero_init: bool = False) -> keras.Model:
    """The stand-in of ``build``'s model, ``scale`` times narrower, parametrised after muP
    with the full model as its base shape.

    A builder whose module names its width setting (``WIDTH``: mlp3's and cnn's ``width``,
    MobileNetV2's ``alpha``) builds it itself at the divided width; any other Sequential or
    functional model is cloned with each layer's width divided (``WIDTHS``).

    Raises:
        ValueError: one line naming the layer that cannot be narrowed, or why not.
    """
    full = build(input_shape, num_classes, hparams)
    setting = getattr(sys.modules.get(getattr(build, "func", build).__module__), "WIDTH", None)
    narrow = (_built_narrow(build, setting, input_shape, num_classes, hparams, scale)
              if setting else _cloned_narrow(full, scale))
    model = _with_readout(narrow)
    base = full.trainable_variables
    mine = model.trainable_variables
    if len(base) != len(mine):
        raise ValueError(f"surrogate.scale={scale}: the stand-in of {full.name} has "
                         f"{len(mine)} trainable weights, the model {len(base)}")
    initializers = _initializers(model)
    readout = _readout_layer(model)
    rates = []
    for b, v in zip(base, mine, strict=True):
        r = role(b.shape, v.shape, v.path)
        rates.append((adaptive_rate(r), sgd_rate(r)))
        if readout_zero_init and v is readout.kernel:
            v.assign(np.zeros(v.shape, v.dtype))
            continue
        init = initializers.get(id(v))
        if isinstance(init, keras.initializers.VarianceScaling) and len(v.shape) >= 2:
            factor = init_factor(b.shape, v.shape, r, init.mode)
            if factor != 1.0:
                v.assign(np.asarray(v.numpy() * factor, v.dtype))
        if v is readout.kernel:
            readout.input_multiplier = readout_multiplier(r)
    model._packexp_stand_in = StandIn(scale, tuple(rates))
    return model


def _built_narrow(build: Callable[..., keras.Model], setting: str, input_shape, num_classes,
                  hparams: Mapping[str, Any], scale: int) -> keras.Model:
    """The builder's own model at its ``setting`` divided (where the trial's hyper-parameters
    set it too, theirs)."""
    keywords = dict(getattr(build, "keywords", {}))
    func = getattr(build, "func", build)
    width = keywords.get(setting, inspect.signature(func).parameters[setting].default)
    hparams = dict(hparams)
    if setting in hparams:
        width = hparams[setting]
    divided = (narrowed(width, scale) if isinstance(width, int) and not isinstance(width, bool)
               else float(width) / scale)
    if setting in hparams:
        hparams[setting] = divided
    args = getattr(build, "args", ())
    return func(*args, input_shape, num_classes, hparams, **{**keywords, setting: divided})


def _cloned_narrow(model: keras.Model, scale: int) -> keras.Model:
    """``model`` cloned with each layer's width divided by ``scale`` but the readout's."""
    readout = _readout_layer(model)
    current: list[keras.layers.Layer] = []

    def narrow(layer: keras.layers.Layer) -> keras.layers.Layer:
        current[:] = [layer]
        config = layer.get_config()
        if layer is readout:
            return type(layer).from_config(config)
        keys = next((keys for cls, keys in WIDTHS if type(layer) is cls), None)
        if keys is None:
            if layer.trainable_weights and not isinstance(layer, FOLLOWERS):
                raise ValueError(f"surrogate.scale={scale}: layer {layer.name} "
                                 f"({type(layer).__name__}) has weights and no width packexp "
                                 "can divide (docs/stand-ins.md)")
            return _copy(layer)
        if not keys:
            raise ValueError(f"surrogate.scale={scale}: layer {layer.name} "
                             f"({type(layer).__name__}) sets its own output shape; packexp "
                             "cannot divide it (docs/stand-ins.md)")
        for key in keys:
            if config.get(key) is not None:
                config[key] = narrowed(int(config[key]), scale)
        return type(layer).from_config(config)

    if not isinstance(model, keras.Sequential) and not _functional(model):
        raise ValueError(f"surrogate.scale={scale}: model {model.name} is subclassed; only "
                         "Sequential and functional models can be narrowed by cloning (or "
                         "give its builder a WIDTH setting, docs/stand-ins.md)")
    try:
        return keras.models.clone_model(model, clone_function=narrow)
    except Exception as e:  # Keras's own errors of shapes that no longer match
        if str(e).startswith("surrogate."):
            raise
        where = f"layer {current[0].name}" if current else f"model {model.name}"
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # Keras's bold
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next((line for line in lines if "shape" in line), lines[0] if lines
                     else type(e).__name__)
        raise ValueError(f"surrogate.scale={scale}: the stand-in cannot be built at {where} "
                         f"(a width that must match another, such as a residual sum with "
                         f"the input?): {first}") from None


def _with_readout(model: keras.Model) -> keras.Model:
    """``model`` cloned with its readout a ``MuReadout``, every other layer as it is."""
    readout = _readout_layer(model)

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        if layer is readout:
            config = layer.get_config()
            config.pop("lora_rank", None)
            return MuReadout.from_config(config)
        if isinstance(layer, keras.Model) and _holds(layer, readout):  # a model it wraps
            return _with_readout(layer)
        return _copy(layer)

    return keras.models.clone_model(model, clone_function=clone)


def _holds(model: keras.Model, layer: keras.layers.Layer) -> bool:
    return any(inner is layer for inner in model._flatten_layers(include_self=False))


def _copy(layer: keras.layers.Layer) -> keras.layers.Layer:
    """A fresh layer of ``layer``'s config; a layer without weights is shared as it is (a
    ``Lambda`` of a Python function cannot be rebuilt from its config)."""
    return layer if not layer.weights else type(layer).from_config(layer.get_config())


def _functional(model: keras.Model) -> bool:
    return type(model).__name__ == "Functional" or (
        type(model) is keras.Model and hasattr(model, "_operations"))


def _readout_layer(model: keras.Model) -> keras.layers.Dense:
    """The Dense layer that makes the model's output: the last layer with a kernel on the
    path back from the output through layers without weights."""
    layer = (model.layers[-1] if isinstance(model, keras.Sequential)
             else model.outputs[0]._keras_history[0])
    seen = 0
    while not isinstance(layer, keras.layers.Dense):
        if isinstance(layer, keras.Model) and layer.outputs:  # a model it wraps: its own
            layer = layer.outputs[0]._keras_history[0]
            seen += 1
            continue
        if layer.weights or seen > 16:
            raise ValueError(f"model {model.name}: its output does not come from a Dense "
                             f"layer ({layer.name}, {type(layer).__name__}); a stand-in needs "
                             "a Dense readout")
        inbound = layer._inbound_nodes[0].input_tensors if layer._inbound_nodes else []
        if len(inbound) != 1:
            raise ValueError(f"model {model.name}: no single Dense readout before "
                             f"{layer.name}")
        layer = inbound[0]._keras_history[0]
        seen += 1
    return layer


def _initializers(model: keras.Model) -> dict[int, Any]:
    """Each kernel's initialiser, by its variable's identity, in every nested layer."""
    out: dict[int, Any] = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        for name, attr in INITIALIZERS.items():
            var = getattr(layer, name, None)
            if isinstance(var, keras.Variable):
                out[id(var)] = getattr(layer, attr, None)
    return out
