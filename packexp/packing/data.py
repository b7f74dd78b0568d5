"""The dataset on the device, once per pack, and each member's seeded data order."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packexp.data import Dataset
from packexp.search_space import derive_seed


class DeviceData:
    """Train and validation tensors placed on the device once and shared by every member."""

    def __init__(self, dataset: Dataset, device: str | None = None) -> None:
        self.dataset = dataset
        with tf.device(device or _default_device()):
            self.x_train = tf.constant(dataset.x_train)
            self.y_train = tf.constant(dataset.y_train)
            self.x_val = tf.constant(dataset.x_val)
            self.y_val = tf.constant(dataset.y_val)

    @property
    def train_size(self) -> int:
        return int(self.dataset.x_train.shape[0])

    @property
    def val_size(self) -> int:
        return int(self.dataset.x_val.shape[0])


def preprocess(x: tf.Tensor) -> tf.Tensor:
    """uint8 images to float32 in [0, 1]; float features pass through."""
    if x.dtype == tf.uint8:
        return tf.cast(x, tf.float32) / 255.0
    return tf.cast(x, tf.float32)


def batch_indices(seed: int, n: int, batch_size: int, start: int, steps: int) -> np.ndarray:
    """Example indices of ``steps`` batches from global step ``start`` on.

    Epoch ``e`` visits a permutation seeded by ``(seed, e)`` and drops the remainder, so a
    member's data order is a function of its seed and step alone, whatever pack it is in.

    Returns:
        int32 array of shape ``[steps, batch_size]``.
    """
    per_epoch = n // batch_size
    out = np.empty((steps, batch_size), dtype=np.int32)
    done = 0
    while done < steps:
        epoch, offset = divmod(start + done, per_epoch)
        take = min(per_epoch - offset, steps - done)
        perm = np.random.default_rng(derive_seed(seed, epoch)).permutation(n)
        window = perm[offset * batch_size : (offset + take) * batch_size]
        out[done : done + take] = window.reshape(take, batch_size)
        done += take
    return out


def _default_device() -> str:
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"
