"""scikit-learn's bundled handwritten digits: 1797 8x8 images, no download."""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.datasets import load_digits

from packexp.data import Dataset, Scaling, split


def load(val_fraction: float = 0.2, images: bool = False, seed: int = 0) -> Dataset:
    """Loads the digits.

    Args:
        val_fraction: Share held out for validation.
        images: Give uint8 ``[8, 8, 1]`` images instead of 64 float features in [0, 1]
            (``load_digits().data / 16``: a kept model takes ``load_digits().data``). The
            config's ``auto`` is resolved from the model before this is called
            (``packexp.config.fit_dataset_to_model``).
        seed: Seed of the split.
    """
    if not isinstance(images, bool):
        raise ValueError(f"images={images!r}: must be true, false or auto (auto is resolved "
                         "from the model by packexp's runner)")
    digits = load_digits()
    if images:
        x = (digits.images * (255 / 16)).round().astype(np.uint8)[..., None]
        return split("digits", x, digits.target, val_fraction, seed, num_classes=10)
    # Pixel counts 0-16 scaled to [0, 1]; a kept model takes load_digits().data as it is.
    scaling = Scaling(np.zeros(64, np.float32), np.full(64, 16, np.float32))
    data = split("digits", scaling(digits.data), digits.target, val_fraction, seed,
                 num_classes=10)
    return dataclasses.replace(data, inputs=scaling)
