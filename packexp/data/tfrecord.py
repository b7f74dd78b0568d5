"""TFRecord shards of encoded images (JPEG/PNG bytes) and integer labels, as
``tf.train.Example`` records; streamed (``dataset.cache=none``) or decoded into memory."""

from __future__ import annotations

import glob
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packexp.data import Dataset
from packexp.data.streamed import Records, StreamedImages, check_cache, fits_memory
from packexp.errors import ConfigError

SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")


def load(
    path: str | None = None,
    image_key: str = "image",
    label_key: str = "label",
    image_size: Sequence[int] = (32, 32),
    val_fraction: float = 0.2,
    seed: int = 0,
    cache: str = "auto",
    memory_share: float = 0.25,
    block: int = 512,
    prefetch: int = 2,
    parallel: int | None = None,
    epoch_size: int | None = None,
    augment: Mapping[str, Any] | None = None,
) -> Dataset | StreamedImages:
    """Loads every record of the shards ``path`` names; classes are the sorted labels.

    Args:
        path: A TFRecord file, a folder of them (``*.tfrecord``, ``*.tfrecords``, ``*.tfr``),
            or a glob; uncompressed.
        image_key: The feature holding each record's encoded image (bytes).
        label_key: The feature holding its class (int64).
        image_size, val_fraction, seed, cache, memory_share, block, prefetch, parallel,
            epoch_size, augment: As ``dataset=image_folder``'s (``data.image_folder.load``).

    Returns:
        Streamed: the records' places and labels (``StreamedImages``). In memory: uint8
        ``[n, height, width, 3]`` images decoded as a stream decodes them, and int32 labels.
    """
    from packexp.data.image_folder import _size, augmentation, check_stream_keys, stratified

    check_cache(cache)
    augments = augmentation(augment)
    check_stream_keys(memory_share, block, prefetch, epoch_size, cache, augments)
    size = _size(image_size)
    shards = _shards(path)
    refs = np.concatenate([_index(i, shard) for i, shard in enumerate(shards)])
    if not len(refs):
        raise ConfigError(f"dataset.path={path}: its TFRecord files hold no records")
    labels = _labels(shards, image_key, label_key)
    classes, y = np.unique(labels, return_inverse=True)
    train, val = stratified(y, val_fraction, seed)
    stream = StreamedImages(
        "tfrecord", Records(shards, refs[train], image_key), y[train].astype(np.int32),
        Records(shards, refs[val], image_key), y[val].astype(np.int32), len(classes), size,
        seed=seed, block=block, prefetch=prefetch, parallel=parallel, epoch_size=epoch_size,
        **augments)
    if cache == "none" or epoch_size is not None or any(augments.values()) or (
            cache == "auto" and not fits_memory(stream.decoded_bytes(), memory_share)):
        return stream
    # In memory: decoded once, as the stream decodes them, in the split's order.
    x_train, x_val = _decoded(stream, train=True), _decoded(stream, train=False)
    return Dataset("tfrecord", x_train, stream.y_train, x_val, stream.y_val, len(classes))


def _decoded(stream: StreamedImages, *, train: bool) -> np.ndarray:
    """Every image of a split, decoded in the split's order."""
    source, labels = (stream.train, stream.y_train) if train else (stream.val, stream.y_val)
    rows = np.arange(len(source))
    blocks = [x.numpy() for x, _ in stream._read(source, rows, labels, stream.block)]
    return np.concatenate(blocks) if blocks else np.zeros((0, *stream.input_shape), np.uint8)


def _shards(path: str | None) -> tuple[str, ...]:
    if path is None:
        raise ConfigError("dataset.path=None: give a TFRecord file, a folder of them or a "
                          "glob as dataset.path=...")
    root = Path(path).expanduser()
    if root.is_dir():
        found = sorted(str(f) for f in root.iterdir()
                       if f.is_file() and f.suffix.lower() in SUFFIXES)
    elif root.is_file():
        found = [str(root)]
    else:
        found = sorted(glob.glob(str(root)))
    if not found:
        raise ConfigError(f"dataset.path={path}: no TFRecord files ({', '.join(SUFFIXES)})")
    return tuple(found)


def _index(shard_index: int, shard: str) -> np.ndarray:
    """Each record's (shard, data offset, length), read from the TFRecord framing: an 8-byte
    length, its 4-byte CRC, the data and the data's 4-byte CRC."""
    rows = []
    size = Path(shard).stat().st_size
    with open(shard, "rb") as f:
        offset = 0
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                raise ConfigError(f"dataset.path: {shard}: not an uncompressed TFRecord file "
                                  f"(a record header cut short at byte {offset})")
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + 12 + length + 4
            if end > size:
                raise ConfigError(f"dataset.path: {shard}: not an uncompressed TFRecord file "
                                  f"(a record at byte {offset} runs past its end)")
            rows.append((shard_index, offset + 12, length))
            f.seek(end)
            offset = end
    return np.asarray(rows, np.int64).reshape(-1, 3)


def _labels(shards: Sequence[str], image_key: str, label_key: str) -> np.ndarray:
    """Every record's label, in record order; the schema checked on the first record."""
    import tensorflow as tf

    first = next(iter(tf.data.TFRecordDataset(shards[0]).take(1)), None)
    if first is not None:
        features = tf.train.Example.FromString(first.numpy()).features.feature
        kinds = {name: feature.WhichOneof("kind") for name, feature in features.items()}
        for key, name, kind in (("image_key", image_key, "bytes_list"),
                                ("label_key", label_key, "int64_list")):
            if kinds.get(name) != kind:
                found = ", ".join(f"{n} ({k.split('_')[0]})" for n, k in sorted(kinds.items()))
                raise ConfigError(f"dataset.{key}={name}: {shards[0]} has no {kind.split('_')[0]}"
                                  f" feature {name!r}; its records hold: {found}")
    spec = {label_key: tf.io.FixedLenFeature([], tf.int64)}
    records = tf.data.TFRecordDataset(list(shards)).map(
        lambda r: tf.io.parse_single_example(r, spec)[label_key],
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(4096)
    try:
        parts = [labels.numpy() for labels in records]
    except tf.errors.InvalidArgumentError as e:
        raise ConfigError(f"dataset.label_key={label_key}: a record without it, or of another "
                          f"schema ({' '.join(e.message.split())[:200]})") from None
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
