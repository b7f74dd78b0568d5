"""An activation chosen at run time: one built model, and one traced step, serve every
activation a search space lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    takes a trial (``set_activation``).
    """

    def __init__(self, choices: Sequence[str], selected: str | None = None, **kwargs: Any
                 ) -> None:
        super().__init__(**kwargs)
        self.choices = tuple(choices)
        self.functions = [keras.activations.get(name) for name in self.choices]
        self.selected = selected or self.choices[0]
        # Set past Keras's attribute tracking: the choice is no weight of the model.
        object.__setattr__(self, "choice", tf.Variable(self._index(self.selected),
                                                       trainable=False, dtype=tf.int32))

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
        choice = self.choice.value()
        out = self.functions[0](x)
        for k, f in enumerate(self.functions[1:], start=1):
            out = tf.where(tf.equal(choice, k), f(x), out)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "choices": list(self.choices),
                "selected": self.selected}


def selectors(model: keras.Model) -> list[SelectActivation]:
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, SelectActivation)]


def set_activation(model: keras.Model, hparams: Mapping[str, Any]) -> None:
    """Selects ``hparams["activation"]`` in every ``SelectActivation`` of ``model``."""
    if "activation" in hparams:
        for layer in selectors(model):
            layer.select(hparams["activation"])
