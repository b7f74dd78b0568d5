"""Datasets as in-memory arrays: one module per dataset, named as its config file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Train and validation arrays.

    Images are uint8 ``[n, h, w, c]``; features are float32 ``[n, d]``. Labels are int32
    classes; with ``regression``, float32 values, and ``num_classes`` is 1 (the model's one
    output).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int
    regression: bool = False

    streams = False  # in memory; ``data.streamed`` reads from files as training goes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def train_size(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def val_size(self) -> int:
        return int(self.x_val.shape[0])


def split(
    name: str, x: np.ndarray, y: np.ndarray, val_fraction: float, seed: int, num_classes: int
) -> Dataset:
    """A deterministic stratified train/validation split."""
    from sklearn.model_selection import train_test_split

    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction!r}: must be between 0 and 1")
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=val_fraction, random_state=seed, stratify=y
    )
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=y_train.astype(np.int32),
        x_val=x_val,
        y_val=y_val.astype(np.int32),
        num_classes=num_classes,
    )


def split_values(name: str, x: np.ndarray, y: np.ndarray, val_fraction: float,
                 seed: int) -> Dataset:
    """A deterministic train/validation split of real-valued targets (a regression)."""
    from sklearn.model_selection import train_test_split

    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction!r}: must be between 0 and 1")
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=val_fraction,
                                                      random_state=seed)
    return Dataset(name, x_train, y_train.astype(np.float32), x_val, y_val.astype(np.float32),
                   num_classes=1, regression=True)
