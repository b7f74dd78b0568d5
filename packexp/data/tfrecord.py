"""TFRecord shards of encoded images (JPEG/PNG bytes) and integer labels, as
``tf.train.Example`` records; streamed (``dataset.cache=none``) or decoded into memory."""

from __future__ import annotations

import glob
import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packexp.data import Dataset
from packexp.data.streamed import (
    Records,
    StreamedImages,
    augmentation,
    check_cache,
    check_stream_keys,
    fits_memory,
    stratified,
)
from packexp.errors import ConfigError

SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
# Beside shards of serialized tensors (``write``): their dtype and shape.
SPEC = "tensors.json"


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
    val_path: str | None = None,
) -> Dataset | StreamedImages:
    """Loads every record of the shards ``path`` names; classes are the sorted labels.

    Args:
        path: A TFRecord file, a folder of them (``*.tfrecord``, ``*.tfrecords``, ``*.tfr``),
            or a glob; uncompressed.
        image_key: The feature holding each record's encoded image (bytes).
        label_key: The feature holding its class (int64).
        val_path: Shards of the validation split, as ``path``; None holds out
            ``val_fraction`` of ``path``'s records, stratified by class.
        image_size, val_fraction, seed, cache, memory_share, block, prefetch, parallel,
            epoch_size, augment: As ``dataset=image_folder``'s (``data.image_folder.load``).

    Returns:
        Streamed: the records' places and labels (``StreamedImages``). In memory: uint8
        ``[n, height, width, 3]`` images decoded as a stream decodes them, and int32 labels.
    """
    from packexp.data.image_folder import _size

    check_cache(cache)
    augments = augmentation(augment)
    check_stream_keys(memory_share, block, prefetch, epoch_size, cache, augments)
    size = _size(image_size)
    shards, refs, labels = _read_index("path", path, image_key, label_key)
    tensors = _tensors(shards)
    if tensors and any(augments.values()):
        raise ConfigError("dataset.augment: augments images; these records hold tensors")
    if val_path is None:
        classes, y = np.unique(labels, return_inverse=True)
        train, val = stratified(y, val_fraction, seed)
        train_records, val_records = Records(shards, refs[train], image_key), Records(
            shards, refs[val], image_key)
        y_train, y_val = y[train], y[val]
    else:
        val_shards, val_refs, val_labels = _read_index("val_path", val_path, image_key,
                                                       label_key)
        if _tensors(val_shards) != tensors:
            raise ConfigError(f"dataset.val_path={val_path}: its records are not of "
                              f"dataset.path's kind ({tensors or 'images'})")
        classes, y = np.unique(np.concatenate([labels, val_labels]), return_inverse=True)
        train_records, val_records = (Records(shards, refs, image_key),
                                      Records(val_shards, val_refs, image_key))
        y_train, y_val = y[:len(labels)], y[len(labels):]
    stream = StreamedImages(
        "tfrecord", train_records, y_train.astype(np.int32), val_records,
        y_val.astype(np.int32), len(classes), size, seed=seed, block=block, prefetch=prefetch,
        parallel=parallel, epoch_size=epoch_size, tensors=tensors, **augments)
    if cache == "none" or epoch_size is not None or any(augments.values()) or (
            cache == "auto" and not fits_memory(stream.decoded_bytes(), memory_share)):
        return stream
    # In memory: decoded once, as the stream decodes them, in the split's order.
    x_train, x_val = _decoded(stream, train=True), _decoded(stream, train=False)
    return Dataset("tfrecord", x_train, stream.y_train, x_val, stream.y_val, len(classes))


def _read_index(key: str, path: str | None, image_key: str, label_key: str
                ) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """The shards ``path`` names, each record's place and every label."""
    shards = _shards(path, key)
    refs = np.concatenate([_index(i, shard) for i, shard in enumerate(shards)])
    if not len(refs):
        raise ConfigError(f"dataset.{key}={path}: its TFRecord files hold no records")
    return shards, refs, _labels(shards, image_key, label_key)


def _tensors(shards: Sequence[str]) -> tuple[str, tuple[int, ...]] | None:
    """The dtype and shape of records of serialized tensors, from the ``SPEC`` file beside
    the shards (``write``); None for records of encoded images."""
    spec = Path(shards[0]).parent / SPEC
    if not spec.exists():
        return None
    facts = json.loads(spec.read_text())
    return facts["dtype"], tuple(facts["shape"])


def write(dataset: Any, folder: Path, shard_size: int = 4096) -> int:
    """Writes a ``tf.data.Dataset`` of ``(x, y)`` examples (or batches of them) as TFRecord
    shards of serialized tensors, under the keys ``x`` and ``y``, with their dtype and shape
    in ``SPEC``; returns how many. ``x`` is uint8 images ``[h, w, c]`` or float features;
    ``y`` an integer class.

    Raises:
        ConfigError: The dataset's elements are not such pairs.
    """
    import tensorflow as tf

    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ConfigError(f"data: a tf.data.Dataset of (x, y) pairs; its elements are {spec}")
    x_spec, y_spec = spec
    if len(x_spec.shape) and x_spec.shape[0] is None:  # batches: taken apart
        dataset = dataset.unbatch()
        x_spec, y_spec = dataset.element_spec
    if not y_spec.dtype.is_integer or y_spec.shape.rank != 0:
        raise ConfigError(f"data: labels must be integer classes, one per example; the "
                          f"dataset's are {y_spec.dtype.name} of shape {y_spec.shape}")
    if not x_spec.shape.is_fully_defined():
        raise ConfigError(f"data: every example's x must have one shape; the dataset's is "
                          f"{x_spec.shape}")
    dtype = "uint8" if x_spec.dtype == tf.uint8 else "float32"
    folder.mkdir(parents=True, exist_ok=True)
    n, writer = 0, None
    try:
        for x, y in dataset:
            if n % shard_size == 0:
                if writer is not None:
                    writer.close()
                writer = tf.io.TFRecordWriter(str(folder / f"part-{n // shard_size:05d}.tfrecord"))
            value = tf.io.serialize_tensor(tf.cast(x, dtype)).numpy()
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[value])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))})
            ).SerializeToString())
            n += 1
    finally:
        if writer is not None:
            writer.close()
    if n == 0:
        raise ConfigError("data: the tf.data.Dataset holds no examples")
    (folder / SPEC).write_text(json.dumps({"dtype": dtype, "shape": x_spec.shape.as_list()}))
    return n


def _decoded(stream: StreamedImages, *, train: bool) -> np.ndarray:
    """Every image of a split, decoded in the split's order."""
    source, labels = (stream.train, stream.y_train) if train else (stream.val, stream.y_val)
    rows = np.arange(len(source))
    blocks = [x.numpy() for x, _ in stream._read(source, rows, labels, stream.block)]
    return np.concatenate(blocks) if blocks else np.zeros((0, *stream.input_shape), np.uint8)


def _shards(path: str | None, key: str = "path") -> tuple[str, ...]:
    if path is None:
        raise ConfigError(f"dataset.{key}=None: give a TFRecord file, a folder of them or a "
                          f"glob as dataset.{key}=...")
    root = Path(path).expanduser()
    if root.is_dir():
        found = sorted(str(f) for f in root.iterdir()
                       if f.is_file() and f.suffix.lower() in SUFFIXES)
    elif root.is_file():
        found = [str(root)]
    else:
        found = sorted(glob.glob(str(root)))
    if not found:
        raise ConfigError(f"dataset.{key}={path}: no TFRecord files ({', '.join(SUFFIXES)})")
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
