"""A multi-layer perceptron: ``depth`` hidden Dense layers of ``width`` units (three of 64,
the paper's MLP-3, by default)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.errors import positive_int
from packexp.space.options import activation_of

if TYPE_CHECKING:  # Keras is imported where a model is built, not to read a default
    import keras

ACTIVATIONS = ("sigmoid", "leaky_relu", "tanh", "relu")
# It flattens images, so it takes anything; a dataset with images: auto gives it features.
NEEDS_IMAGES = False
# Hyper-parameters a built model takes at run time (``SelectActivation``): trials that differ
# only in these share one built model and one traced step.
RUNTIME_HPARAMS = ("activation",)
# The setting a stand-in divides (surrogate.scale, packexp.models.stand_in).
WIDTH = "width"


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    width: int = 64,
    depth: int = 3,
) -> keras.Model:
    """Builds the MLP; image inputs are flattened.

    Args:
        input_shape: Shape of one example.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, one of ``ACTIVATIONS``; ``width`` and ``depth``, where
            the search space lists them, override the arguments of the same names.
        width: Units per hidden layer.
        depth: Hidden layers; the paper's MLP-3 has three.
    """
    import keras

    from packexp.models.activation import SelectActivation

    activation = activation_of(hparams)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: mlp3 knows {list(ACTIVATIONS)}")
    width, depth = hparams.get("width", width), hparams.get("depth", depth)
    for key, value in (("width", width), ("depth", depth)):
        positive_int(key, value)
    layers: list[keras.layers.Layer] = [keras.Input(tuple(input_shape))]
    if len(input_shape) > 1:
        layers.append(keras.layers.Flatten())
    for _ in range(depth):
        layers += [keras.layers.Dense(width), SelectActivation(ACTIVATIONS, activation)]
    layers.append(keras.layers.Dense(num_classes))
    return keras.Sequential(layers, name="mlp3")
