"""An activation chosen at run time: one built model, and one traced step, serve every
activation a search space lists."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf


class SelectActivation(keras.layers.Layer):
    """Applies one of ``choices`` (Keras activation names), the one ``select`` last chose.

    The choice is a variable read by the traced step. Every choice is computed and the
    chosen one selected (``tf.where``; its gradient is the chosen activation's, the others'
    exact zeros added), so a member computes what a model built with that activation
    computes, bit for bit. (``tf.switch_case`` would run only the chosen one, but XLA on a
    CPU crashed compiling it under TensorFlow 2.21.) The choice is not one of the model's
    weights: it is a trial's hyper-parameter, set from its ``activation`` whenever a member
    takes a trial (``set_activation``). A looped program, never compiled, gives it as a
    tensor while it traces (``choosing``), and a pack's step that XLA does not compile has it
    switch on the variable (``choosing`` with no choice): either runs only the chosen
    function (``tf.switch_case``), the same values and gradients without computing the
    others (measured on MobileNetV2: computing all four made a pack's steps 38% slower).

    ``relu_max_value`` caps ``relu`` where the layer replaces a capped ReLU (MobileNetV2's
    ReLU6), so ``relu`` keeps the network's own non-linearity.
    """

    def __init__(self, choices: Sequence[str], selected: str | None = None,
                 relu_max_value: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.choices = tuple(choices)
        self.relu_max_value = None if relu_max_value is None else float(relu_max_value)
        self.functions = [
            functools.partial(keras.activations.relu, max_value=self.relu_max_value)
            if name == "relu" and self.relu_max_value is not None
            else keras.activations.get(name) for name in self.choices]
        self.selected = selected or self.choices[0]
        # Set past Keras's attribute tracking: the choice is no weight of the model.
        object.__setattr__(self, "choice", tf.Variable(self._index(self.selected),
                                                       trainable=False, dtype=tf.int32))
        object.__setattr__(self, "_given", None)

    def _index(self, name: str) -> int:
        if name not in self.choices:
            raise ValueError(f"activation={name!r}: this model knows {list(self.choices)}")
        return self.choices.index(name)

    def select(self, name: str) -> None:
        self.choice.assign(self._index(name))
        self.selected = name

    def call(self, x: tf.Tensor) -> tf.Tensor:
        if len(self.functions) == 1:
            return self.functions[0](x)
        if self._given is not None:  # only the chosen function runs
            given = self._given.value() if self._given is self.choice else self._given
            return tf.switch_case(given, [lambda f=f: f(x) for f in self.functions])
        choice = self.choice.value()
        out = self.functions[0](x)
        for k, f in enumerate(self.functions[1:], start=1):
            out = tf.where(tf.equal(choice, k), f(x), out)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "choices": list(self.choices),
                "selected": self.selected, "relu_max_value": self.relu_max_value}


def selectors(model: keras.Model) -> list[SelectActivation]:
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, SelectActivation)]


def set_activation(model: keras.Model, hparams: Mapping[str, Any]) -> None:
    """Selects ``hparams["activation"]`` in every ``SelectActivation`` of ``model``."""
    if "activation" in hparams:
        for layer in selectors(model):
            layer.select(hparams["activation"])


def choice_index(model: keras.Model) -> int:
    """The index of the activation ``model``'s selectors hold (0 when it has none)."""
    layers = selectors(model)
    return layers[0].choices.index(layers[0].selected) if layers else 0


@contextlib.contextmanager
def choosing(model: keras.Model, choice: tf.Tensor | None = None) -> Iterator[None]:
    """While tracing within it, ``model``'s selectors run only one activation
    (``tf.switch_case``, which XLA must not compile): ``choice`` (an int32 scalar tensor: a
    looped program gives each member's), or with none each selector's own variable, read
    when the program runs."""
    layers = selectors(model)
    for layer in layers:
        object.__setattr__(layer, "_given", layer.choice if choice is None else choice)
    try:
        yield
    finally:
        for layer in layers:
            object.__setattr__(layer, "_given", None)
