"""Datasets as in-memory arrays: one module per dataset, named as its config file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scaling:
    """An affine map from the values a user gives to the values a model trains on:
    ``(raw - mean) / std`` per feature (or of the target), in float32, as
    ``keras.layers.Normalization(mean=mean, variance=std**2)`` computes it, so a saved model
    that starts with that layer sees exactly the inputs its weights were trained and scored
    on. ``std`` is never 0 (a constant column divides by 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fitted(cls, values: np.ndarray) -> Scaling:
        """The training rows' moments: each column's mean and std (1 where constant)."""
        values = np.asarray(values, np.float32)
        mean = values.mean(axis=0, dtype=np.float64).astype(np.float32)
        std = values.std(axis=0, dtype=np.float64).astype(np.float32)
        std[std <= 1e-7] = 1  # Normalization divides by max(std, 1e-7)
        return cls(mean, std)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """``values`` scaled, float32 throughout (what the saved model's first layer does)."""
        return (np.asarray(values, np.float32) - self.mean) / self.std

    def inverse(self, values: np.ndarray) -> np.ndarray:
        """Back to the user's units: ``mean + values * std``, as the saved model's last
        layer (``Normalization(invert=True)``) computes it."""
        return self.mean + np.asarray(values, np.float32) * self.std

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": np.atleast_1d(self.mean).tolist(),
                "std": np.atleast_1d(self.std).tolist()}


@dataclass(frozen=True)
class Dataset:
    """Train and validation arrays.

    Images are uint8 ``[n, h, w, c]``; features are float32 ``[n, d]``. Labels are int32
    classes; with ``regression``, float32 values, and ``num_classes`` is 1 (the model's one
    output).

    ``inputs`` maps the rows a user gives (a CSV's feature columns, the arrays passed to
    ``tune``) to ``x_train`` and ``x_val``; ``targets`` maps a regression's targets to
    ``y_train`` and ``y_val``. None: the values are as given. A kept model carries both
    (``packing.export``), so it takes the user's rows and answers in the target's units.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int
    regression: bool = False
    inputs: Scaling | None = None
    targets: Scaling | None = None

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
