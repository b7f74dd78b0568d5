"""Images read from their files as training goes (``dataset.cache=none``), on ``tf.data``:
an image folder's files, or the records of TFRecord shards.

A streamed dataset holds paths and labels, never pixels: an epoch's examples are read,
decoded and resized in blocks, in parallel and prefetched, so memory holds a few blocks
whatever the dataset's size. Each epoch visits the training files in one order, a function
of the dataset's seed and the epoch alone: a pack reads it once for all its members, and a
member trained alone reads the same rows in the same order (``packing.plain``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packexp.errors import ConfigError
from packexp.space import derive_seed

# Separates the epoch orders' seeds from the split's and the trials' own.
ORDER_STREAM = 104729
AUGMENT_STREAM = 1299709
CACHE_MODES = ("auto", "memory", "none")


@dataclass(frozen=True, eq=False)
class Files:
    """Images as one file each (an image folder)."""

    paths: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def encoded(self, rows: np.ndarray, parallel: int) -> Any:
        """A ``tf.data`` dataset of the encoded images of ``rows``, in that order, read
        ``parallel`` at once."""
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices([self.paths[i] for i in rows]).map(
            tf.io.read_file, num_parallel_calls=parallel, deterministic=True)

    def culprit(self, rows: Sequence[int]) -> str:
        """The error line naming the first of ``rows`` that does not decode."""
        from PIL import Image

        for i in rows:
            try:
                with Image.open(self.paths[i]) as image:
                    image.load()
            except Exception as e:  # any reason names the file
                reason = " ".join(str(e).split()) or type(e).__name__
                return f"dataset.path: {self.paths[i]}: cannot decode image ({reason})"
        return (f"dataset.path: one of {len(rows)} images from {self.paths[rows[0]]} on "
                "cannot be decoded")

    def fingerprint(self) -> bytes:
        return "\n".join(self.paths).encode()


@dataclass(frozen=True, eq=False)
class Records:
    """Images as records of TFRecord shards: each record's shard, byte offset and length,
    indexed once when the dataset loads, so that an epoch reads them in any order."""

    shards: tuple[str, ...]
    refs: np.ndarray  # int64 [n, 3]: shard, offset of the record's data, its length
    image_key: str

    def __len__(self) -> int:
        return len(self.refs)

    def encoded(self, rows: np.ndarray, parallel: int) -> Any:
        import tensorflow as tf

        refs, shards, key = self.refs[rows], self.shards, self.image_key

        def records():  # a seek and a read each: the decoding runs in parallel after it
            with contextlib.ExitStack() as stack:
                files: dict[int, Any] = {}
                for shard, offset, length in refs:
                    if shard not in files:
                        files[shard] = stack.enter_context(open(shards[shard], "rb"))
                    files[shard].seek(offset)
                    yield files[shard].read(length)

        spec = {key: tf.io.FixedLenFeature([], tf.string)}
        return tf.data.Dataset.from_generator(
            records, output_signature=tf.TensorSpec([], tf.string)).map(
            lambda record: tf.io.parse_single_example(record, spec)[key],
            num_parallel_calls=parallel, deterministic=True)

    def culprit(self, rows: Sequence[int]) -> str:
        shard, _, _ = self.refs[rows[0]]
        return (f"dataset.path: {self.shards[shard]}: one of records {list(rows)[:3]}... "
                f"holds a {self.image_key!r} that does not decode as a JPEG or PNG image")

    def fingerprint(self) -> bytes:
        return "\n".join(self.shards).encode() + np.ascontiguousarray(self.refs).tobytes()


@dataclass(frozen=True, eq=False)
class StreamedImages:
    """A split of encoded images (files or records) and their labels, decoded block by block
    when read.

    Attributes:
        name: The dataset's name.
        train, val: Where each split's encoded images are (``Files`` or ``Records``).
        y_train, y_val: Their int32 class labels.
        num_classes: How many classes.
        image_size: ``(height, width)`` every image is resized to.
        seed: The seed of every epoch's order.
        block: Examples decoded per block, the unit a pack's members train from.
        prefetch: Blocks decoded ahead of training.
        parallel: Images decoded at once; None: one per usable CPU. (Not ``tf.data``'s
            AUTOTUNE: its tuning thread made dropping a stream's iterator wait up to 3.7 s,
            measured, where a pack's readers stop before the stream's end.)
        epoch_size: Images in an epoch, Hyperband's unit: the first ``epoch_size`` of each
            epoch's order of all the training images; None: all of them.
        flip, crop_padding: Training augmentation done once per image and epoch for the
            whole pack, seeded by (seed, epoch, row): a random horizontal flip, and a random
            crop back to ``image_size`` after zero-padding by this many pixels.
        tensors: Records of serialized tensors (``tf.io.serialize_tensor``) instead of
            encoded images: their dtype and shape, taken as they are (``image_size`` unused).
    """

    name: str
    train: Files | Records
    y_train: np.ndarray
    val: Files | Records
    y_val: np.ndarray
    num_classes: int
    image_size: tuple[int, int]
    seed: int = 0
    block: int = 512
    prefetch: int = 2
    parallel: int | None = None
    epoch_size: int | None = None
    flip: bool = False
    crop_padding: int = 0
    tensors: tuple[str, tuple[int, ...]] | None = None
    regression: bool = field(default=False, init=False)
    streams: bool = field(default=True, init=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.tensors[1]) if self.tensors else (*self.image_size, 3)

    @property
    def dtype(self) -> str:
        """The examples' dtype: uint8 images, or the tensors' own."""
        return self.tensors[0] if self.tensors else "uint8"

    @property
    def train_size(self) -> int:
        """Images in an epoch: ``epoch_size``, or every training image."""
        return min(self.epoch_size or len(self.train), len(self.train))

    @property
    def val_size(self) -> int:
        return len(self.val)

    def order(self, epoch: int) -> np.ndarray:
        """The training rows of epoch ``epoch``, in its order: the same for every member."""
        rng = np.random.default_rng(derive_seed(self.seed, ORDER_STREAM, epoch))
        return rng.permutation(len(self.train))[:self.train_size]

    def train_blocks(self, epoch: int, start: int, stop: int) -> Iterator[tuple[Any, Any]]:
        """Rows ``start:stop`` of epoch ``epoch``'s order as (uint8 images, int32 labels)
        tensors, ``block`` rows at a time."""
        rows = self.order(epoch)[start:stop]
        augment = None
        if self.flip or self.crop_padding:
            augment = (derive_seed(self.seed, AUGMENT_STREAM, epoch), start)
        yield from self._read(self.train, rows, self.y_train[rows], self.block, augment)

    def val_blocks(self, size: int) -> Iterator[tuple[Any, Any]]:
        """The validation images in their split's order, ``size`` at a time."""
        yield from self._read(self.val, np.arange(len(self.val)), self.y_val, size)

    def decoded_bytes(self) -> int:
        """What every example of both splits takes decoded (images: uint8 at
        ``image_size``)."""
        return ((len(self.train) + self.val_size) * int(np.prod(self.input_shape))
                * np.dtype(self.dtype).itemsize)

    def _read(self, source: Files | Records, rows: np.ndarray, labels: np.ndarray,
              size: int, augment: tuple[int, int] | None = None
              ) -> Iterator[tuple[Any, Any]]:
        """``rows`` of ``source`` decoded, ``size`` at a time; with ``augment`` (the epoch's
        seed, the first row's place in the epoch), each augmented by its place."""
        import tensorflow as tf

        if not len(rows):
            return
        height, width = self.image_size

        def decode(encoded):
            if self.tensors:  # a serialized tensor, as it was written
                return tf.ensure_shape(tf.io.parse_tensor(encoded, self.dtype),
                                       self.input_shape)
            image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
            image = tf.image.resize(image, [height, width], method="bilinear")
            return tf.cast(tf.round(tf.clip_by_value(image, 0, 255)), tf.uint8)

        parallel = self.parallel or len(os.sched_getaffinity(0))
        images = source.encoded(rows, parallel).map(decode, num_parallel_calls=parallel,
                                                    deterministic=True)
        if augment is not None:
            epoch_seed, first = augment
            places = tf.data.Dataset.range(first, first + len(rows))
            images = tf.data.Dataset.zip(images, places).map(
                lambda image, place: self._augment(image, tf.stack(
                    [tf.constant(epoch_seed % 2**62, tf.int64), place])),
                num_parallel_calls=parallel, deterministic=True)
        options = tf.data.Options()
        options.autotune.enabled = False  # parallelism as given; no tuning thread to wait for
        images = images.batch(size).prefetch(self.prefetch).with_options(options)
        labels = np.asarray(labels, np.int32)
        it = iter(images)
        for lo in range(0, len(rows), size):
            try:
                batch = next(it)
            except tf.errors.InvalidArgumentError:
                raise ConfigError(source.culprit(list(rows[lo:lo + size]))) from None
            yield batch, tf.constant(labels[lo:lo + size])

    def _augment(self, image: Any, seed: Any) -> Any:
        """One training image's flip and crop, seeded by its epoch and place: whoever reads
        it in that epoch gets the same pixels."""
        import tensorflow as tf

        if self.crop_padding:
            pad = self.crop_padding
            padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
            image = tf.image.stateless_random_crop(padded, tf.shape(image), seed)
        if self.flip:
            image = tf.image.stateless_random_flip_left_right(
                image, seed + tf.constant([0, 1], tf.int64))
        return image


def augmentation(augment: Mapping[str, Any] | None) -> dict[str, Any]:
    """``dataset.augment`` as ``StreamedImages``' keys, each checked."""
    values = {"flip": False, "crop_padding": 0, **(augment or {})}
    unknown = sorted(set(values) - {"flip", "crop_padding"})
    if unknown:
        raise ConfigError(f"dataset.augment.{unknown[0]}: unknown; give flip, crop_padding")
    if not isinstance(values["flip"], bool):
        raise ConfigError(f"dataset.augment.flip={values['flip']!r}: must be true or false")
    pad = values["crop_padding"]
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise ConfigError(f"dataset.augment.crop_padding={pad!r}: must be an integer >= 0")
    return values


def check_stream_keys(memory_share: float, block: int, prefetch: int,
                      epoch_size: int | None, cache: str,
                      augments: Mapping[str, Any] | None = None) -> None:
    """A streamable dataset's own keys, each refused in one line naming it."""
    if not 0 < memory_share <= 1:
        raise ConfigError(f"dataset.memory_share={memory_share!r}: must be in (0, 1]")
    for key, value in (("block", block), ("prefetch", prefetch), ("epoch_size", epoch_size)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"dataset.{key}={value!r}: must be an integer >= 1")
    if epoch_size is not None and cache == "memory":
        raise ConfigError(f"dataset.epoch_size={epoch_size}: needs a stream; use "
                          "dataset.cache=none or auto")
    if augments and any(augments.values()) and cache == "memory":
        raise ConfigError("dataset.augment: augments a stream; use dataset.cache=none or "
                          "auto, or preprocess.flip and preprocess.crop_padding in memory")


def stratified(y: np.ndarray, val_fraction: float, seed: int, by_class: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the training and the validation split, as ``data.split`` draws them
    (``by_class=False``: as ``data.split_values`` does, a regression's)."""
    from sklearn.model_selection import train_test_split

    if not 0 < val_fraction < 1:
        raise ConfigError(f"dataset.val_fraction={val_fraction!r}: must be between 0 and 1")
    try:
        return train_test_split(np.arange(len(y)), test_size=val_fraction, random_state=seed,
                                stratify=y if by_class else None)
    except ValueError as e:  # too few images to hold out one of each class
        raise ConfigError(f"dataset.val_fraction={val_fraction}: {' '.join(str(e).split())}"
                          ) from None


def check_cache(cache: str) -> str:
    if cache not in CACHE_MODES:
        raise ConfigError(f"dataset.cache={cache!r}: must be one of {', '.join(CACHE_MODES)}")
    return cache


def fits_memory(decoded_bytes: int, share: float) -> bool:
    """Whether ``decoded_bytes`` are at most ``share`` of the memory available now."""
    import psutil

    return decoded_bytes <= share * psutil.virtual_memory().available


def magic_ok(path: Path) -> bool:
    """Whether the file starts as a JPEG or a PNG does (read before any decoding)."""
    with open(path, "rb") as f:
        head = f.read(8)
    return head.startswith(b"\xff\xd8") or head.startswith(b"\x89PNG\r\n\x1a\n")
