"""MobileNetV2 from keras.applications, randomly initialised, with a width multiplier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.models import keras_apps

if TYPE_CHECKING:  # Keras is imported where a model is built, not to read a default
    import keras

# Convolutions need [height, width, channels]; a dataset with images: auto gives them.
NEEDS_IMAGES = True
# The activation is a SelectActivation's choice (keras_apps): runtime data, not structure.
RUNTIME_HPARAMS = keras_apps.RUNTIME_HPARAMS
# The setting a stand-in divides (surrogate.scale, packexp.models.stand_in).
WIDTH = "alpha"


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    alpha: float = 0.35,
    bn_momentum: float | None = None,
) -> keras.Model:
    """Builds MobileNetV2 returning logits.

    Args:
        input_shape: Shape of one image, ``[height, width, channels]``.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, which replaces every ReLU6.
        alpha: Width multiplier on every layer's filters; 1.0 is the paper's network.
        bn_momentum: Momentum of the BatchNorm moving statistics; None keeps Keras's 0.999.

    Returns:
        The model.
    """
    return keras_apps.build(input_shape, num_classes, hparams, "MobileNetV2",
                            bn_momentum=bn_momentum, alpha=alpha)
