"""A small CNN for a CPU: ``blocks`` of Conv2D, BatchNorm and the activation, max pooling
between blocks, then global average pooling and the logits. The model a user picks for their
own photos where MobileNetV2 is too slow to search."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.errors import positive_int
from packexp.models.keras_apps import ACTIVATIONS, NEEDS_IMAGES, RUNTIME_HPARAMS
from packexp.space.options import activation_of

if TYPE_CHECKING:  # Keras is imported where a model is built, not to read a default
    import keras

# The keras.applications models' activations, image inputs and runtime hyper-parameter (the
# activation, a SelectActivation's choice: trials that differ only in it share one model).
__all__ = ["ACTIVATIONS", "NEEDS_IMAGES", "RUNTIME_HPARAMS", "WIDTH", "build"]
# The setting a stand-in divides (surrogate.scale, packexp.models.stand_in).
WIDTH = "width"


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    width: int = 16,
    blocks: int = 2,
    bn_momentum: float = 0.7,
) -> keras.Model:
    """Builds the CNN returning logits.

    Args:
        input_shape: Shape of one image, ``[height, width, channels]``.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, one of ``ACTIVATIONS``; ``width`` and ``blocks``, where
            the search space lists them, override the arguments of the same names.
        width: Filters of the first block; each later block doubles them.
        blocks: Conv-BatchNorm-activation blocks; pooling halves the image between them.
        bn_momentum: Momentum of the BatchNorm moving statistics (see conf/model/cnn.yaml).
    """
    import keras

    from packexp.models.activation import SelectActivation

    activation = activation_of(hparams)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: cnn knows {list(ACTIVATIONS)}")
    width, blocks = hparams.get("width", width), hparams.get("blocks", blocks)
    for key, value in (("width", width), ("blocks", blocks)):
        positive_int(key, value)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape={list(input_shape)}: cnn needs images [height, width, "
                         "channels]; use a dataset with images (e.g. dataset.images=auto for "
                         "digits)")
    x = inputs = keras.Input(tuple(input_shape))
    for block in range(blocks):
        if block:
            x = keras.layers.MaxPooling2D(padding="same")(x)
        x = keras.layers.Conv2D(width * 2**block, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=bn_momentum)(x)
        x = SelectActivation(ACTIVATIONS, activation)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="cnn")
