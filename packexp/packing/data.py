"""The dataset on the device, once per pack, and each member's seeded data order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from packexp import telemetry
from packexp.data import Dataset
from packexp.objectives import NO_HEAD, Head
from packexp.packing.preprocessing import check_preprocessing
from packexp.space import derive_seed


class DeviceData:
    """Train and validation tensors placed on the device once and shared by every member."""

    streams = False  # ``StreamData``: read from files as training goes

    def __init__(self, dataset: Dataset, device: str | None = None,
                 head: Head = NO_HEAD) -> None:
        self.dataset = dataset
        self.head = head  # the model's own loss and metrics, where it names them
        with tf.device(device or _default_device()):
            self.x_train = tf.constant(dataset.x_train)
            self.y_train = tf.constant(dataset.y_train)
            self.x_val = tf.constant(dataset.x_val)
            self.y_val = tf.constant(dataset.y_val)

    @property
    def regression(self) -> bool:
        """Whether targets are real values (one output, squared error), not classes."""
        return self.dataset.regression

    @property
    def train_size(self) -> int:
        return int(self.dataset.x_train.shape[0])

    @property
    def val_size(self) -> int:
        return int(self.dataset.x_val.shape[0])

    @property
    def example_spec(self) -> tf.TensorSpec:
        """A batch of inputs: ``[None, *input_shape]`` of the data's dtype."""
        return tf.TensorSpec([None, *self.x_val.shape[1:]], self.x_val.dtype)

    def val_batches(self, size: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """The validation split, ``size`` examples at a time."""
        for lo in range(0, self.val_size, size):
            yield self.x_val[lo : lo + size], self.y_val[lo : lo + size]


class StreamData:
    """A streamed dataset (``data.streamed``) as a pack reads it: nothing on the device but
    the block being trained on. Only plain packs train on it (``program.STREAMED``)."""

    streams = True

    def __init__(self, dataset: Any, head: Head = NO_HEAD) -> None:
        self.dataset = dataset
        self.head = head

    @property
    def regression(self) -> bool:
        return self.dataset.regression

    @property
    def label_dtype(self) -> tf.DType:
        return tf.float32 if self.regression else tf.int32

    @property
    def train_size(self) -> int:
        return self.dataset.train_size

    @property
    def val_size(self) -> int:
        return self.dataset.val_size

    @property
    def example_spec(self) -> tf.TensorSpec:
        return tf.TensorSpec([None, *self.dataset.input_shape], tf.as_dtype(self.dataset.dtype))

    def val_batches(self, size: int) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        yield from self.dataset.val_blocks(size)

    def train_blocks(self, epoch: int, start: int, stop: int
                     ) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        """Rows ``start:stop`` of the epoch's shared order, a block at a time."""
        yield from self.dataset.train_blocks(epoch, start, stop)


def device_data(dataset: Any, head: Head = NO_HEAD) -> DeviceData | StreamData:
    """The dataset as packs read it: on the device, or streamed from its files."""
    if getattr(dataset, "streams", False):
        return StreamData(dataset, head)
    return DeviceData(dataset, head=head)


def preprocess(x: tf.Tensor) -> tf.Tensor:
    """uint8 images to float32 in [0, 1]; float features pass through."""
    if x.dtype == tf.uint8:
        return tf.cast(x, tf.float32) / 255.0
    return tf.cast(x, tf.float32)


@dataclass(frozen=True)
class Preprocessing:
    """What happens to a batch on the device before the model sees it.

    Members with equal ``Preprocessing`` share its work where they share a batch
    (``data_sharing=slice``). Random augmentation is stateless, seeded by the batch's owner
    and step, so it never depends on pack-mates.

    Attributes:
        mean: Per-channel mean subtracted after scaling to [0, 1]; None for none.
        std: Per-channel standard deviation divided by; None for none.
        crop_padding: Random crop of the original size after zero-padding by this many
            pixels on each side (images only); 0 for none.
        flip: Random horizontal flip (images only).
    """

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    crop_padding: int = 0
    flip: bool = False

    @property
    def augments(self) -> bool:
        return self.crop_padding > 0 or self.flip

    def check(self, input_shape: tuple[int, ...]) -> None:
        """Raises ValueError naming the key when this cannot apply to ``input_shape``
        (``preprocessing.check_preprocessing``)."""
        check_preprocessing(self.mean, self.std, self.crop_padding, self.flip, input_shape)

    def __call__(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        """Preprocesses a batch; ``seed`` is a stateless-RNG seed of shape [2]."""
        x = preprocess(x)
        if self.crop_padding:
            x = _random_crop(x, self.crop_padding, seed)
        if self.flip:
            other = seed + tf.constant([0, 1], seed.dtype)
            flip = tf.random.stateless_uniform([tf.shape(x)[0]], other) < 0.5
            x = tf.where(flip[:, None, None, None], tf.reverse(x, axis=[2]), x)
        return self._normalize(x)

    def evaluation(self, x: tf.Tensor) -> tf.Tensor:
        """Validation preprocessing: the same scaling and normalisation, no augmentation."""
        return self._normalize(preprocess(x))

    def _normalize(self, x: tf.Tensor) -> tf.Tensor:
        if self.mean is not None:
            x = x - tf.constant(self.mean, tf.float32)
        if self.std is not None:
            x = x / tf.constant(self.std, tf.float32)
        return x


def _random_crop(x: tf.Tensor, pad: int, seed: tf.Tensor) -> tf.Tensor:
    """A crop at its own random offset for every example, by index gathers (no loop)."""
    n, h, w = tf.shape(x)[0], x.shape[1], x.shape[2]
    padded = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    offsets = tf.random.stateless_uniform([n, 2], seed, maxval=2 * pad + 1, dtype=tf.int32)
    rows = offsets[:, :1] + tf.range(h)[None, :]
    cols = offsets[:, 1:] + tf.range(w)[None, :]
    return tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)


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
    return f"/{telemetry.gpu_device() or 'CPU:0'}"
