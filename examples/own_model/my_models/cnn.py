"""A small CNN whose filters, width and dropout are hyper-parameters of the search."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras

# Convolutions need [height, width, channels]: a dataset with images: auto gives them.
NEEDS_IMAGES = True


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    filters: int = 16,
    width: int = 64,
    dropout: float = 0.0,
) -> keras.Model:
    """Conv-Conv-Pool-Dense returning logits.

    Args:
        input_shape: Shape of one image, ``[height, width, channels]``.
        num_classes: Width of the logits.
        hparams: The trial's hyper-parameters; ``filters``, ``width`` and ``dropout`` there
            override the settings of the same names.
        filters: Filters of the first convolution; the second has twice as many.
        width: Units of the hidden Dense layer.
        dropout: Dropout rate before the classifier; 0 leaves the layer out.

    Returns:
        The model.
    """
    filters = int(hparams.get("filters", filters))
    width = int(hparams.get("width", width))
    dropout = float(hparams.get("dropout", dropout))
    if len(input_shape) != 3:
        raise ValueError(f"input_shape={list(input_shape)}: small_cnn needs images")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout={dropout}: must be in [0, 1)")
    layers = [
        keras.Input(tuple(input_shape)),
        keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(2 * filters, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(width, activation="relu"),
    ]
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    layers.append(keras.layers.Dense(num_classes))
    return keras.Sequential(layers, name="small_cnn")
