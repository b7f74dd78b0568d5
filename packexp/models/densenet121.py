"""DenseNet121 from keras.applications, randomly initialised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras

from packexp.models._keras_apps import build_application

# keras.applications rejects smaller inputs; build_application resizes up to it.
MIN_SIZE = 32
# Convolutions need [height, width, channels]; a dataset with images: auto gives them.
NEEDS_IMAGES = True


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    bn_momentum: float | None = None,
) -> keras.Model:
    """Builds DenseNet121 returning logits.

    Args:
        input_shape: Shape of one image, ``[height, width, channels]``.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, which replaces every ReLU.
        bn_momentum: Momentum of the BatchNorm moving statistics; None keeps Keras's 0.99.

    Returns:
        The model.
    """
    return build_application(
        keras.applications.DenseNet121,
        input_shape,
        num_classes,
        hparams.get("activation", "relu"),
        MIN_SIZE,
        bn_momentum=bn_momentum,
    )
