"""A small 1-D CNN for signals: ``blocks`` of Conv1D, BatchNorm and the activation, max pooling
between blocks, then global average pooling and the logits (mnist1d's sequences near 0.95)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.errors import positive_int
from packexp.models.keras_apps import ACTIVATIONS, RUNTIME_HPARAMS
from packexp.space.options import activation_of

if TYPE_CHECKING:  # Keras is imported where a model is built, not to read a default
    import keras

__all__ = ["ACTIVATIONS", "NEEDS_IMAGES", "RUNTIME_HPARAMS", "WIDTH", "build"]
# Sequences [steps, features], or feature vectors read as one feature per step: a dataset
# with images: auto gives it features.
NEEDS_IMAGES = False
# The setting a stand-in divides (surrogate.scale, packexp.models.stand_in).
WIDTH = "width"


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    width: int = 16,
    blocks: int = 3,
    kernel_size: int = 5,
    bn_momentum: float = 0.7,
) -> keras.Model:
    """Builds the 1-D CNN returning logits.

    Args:
        input_shape: Shape of one example: ``[steps, features]``, or ``[features]``, read as
            that many steps of one feature.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, one of ``ACTIVATIONS``; ``width``, ``blocks`` and
            ``kernel_size``, where the search space lists them, override the arguments of the
            same names.
        width: Filters of the first block; each later block doubles them.
        blocks: Conv-BatchNorm-activation blocks; pooling halves the steps between them.
        kernel_size: Steps each convolution spans.
        bn_momentum: Momentum of the BatchNorm moving statistics (see conf/model/cnn1d.yaml).
    """
    import keras

    from packexp.models.activation import SelectActivation

    activation = activation_of(hparams)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: cnn1d knows {list(ACTIVATIONS)}")
    width, blocks = hparams.get("width", width), hparams.get("blocks", blocks)
    kernel_size = hparams.get("kernel_size", kernel_size)
    for key, value in (("width", width), ("blocks", blocks), ("kernel_size", kernel_size)):
        positive_int(key, value)
    if len(input_shape) not in (1, 2):
        raise ValueError(f"input_shape={list(input_shape)}: cnn1d needs sequences [steps, "
                         "features] or feature vectors; use a dataset without images (e.g. "
                         "dataset.images=auto for digits)")
    x = inputs = keras.Input(tuple(input_shape))
    if len(input_shape) == 1:
        x = keras.layers.Reshape((input_shape[0], 1))(x)
    for block in range(blocks):
        if block:
            x = keras.layers.MaxPooling1D(padding="same")(x)
        x = keras.layers.Conv1D(width * 2**block, kernel_size, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=bn_momentum)(x)
        x = SelectActivation(ACTIVATIONS, activation)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="cnn1d")
