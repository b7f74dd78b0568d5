"""Random data of any shape, for timing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from packexp.data import Dataset
from packexp.errors import positive_int


def load(
    shape: Sequence[int] = (32, 32, 3),
    num_classes: int = 10,
    train_size: int = 1024,
    val_size: int = 256,
    seed: int = 0,
) -> Dataset:
    """Random uint8 images (rank-3 ``shape``) or float32 features (rank 1).

    Args:
        shape: Shape of one example.
        num_classes: Number of label values.
        train_size: Training examples.
        val_size: Validation examples.
        seed: Seed of the data.
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) not in (1, 3) or min(shape) < 1:
        raise ValueError(f"shape={list(shape)}: must be [features] or [height, width, channels]")
    positive_int("num_classes", num_classes, minimum=2,
                 why=" (with one class every model scores 1.0: nothing to tune)")
    for key, value in (("train_size", train_size), ("val_size", val_size)):
        positive_int(key, value)
    rng = np.random.default_rng(seed)
    n = train_size + val_size
    if len(shape) == 3:
        x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    else:
        x = rng.random((n, *shape), dtype=np.float32)
    y = rng.integers(0, num_classes, size=n).astype(np.int32)
    return Dataset("synthetic", x[:train_size], y[:train_size], x[train_size:], y[train_size:],
                   num_classes)
