"""Small data for tests, each defined once: datasets in memory (``features``, ``digits``,
``small_images``, placed on the device by ``device``) and fake dataset files in each format
packexp reads (CIFAR-10's archive, an image folder, a ``.npz``, a CSV), and a folder of
photos large enough to stream (``photo_folder``)."""

from __future__ import annotations

import pickle
import struct
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from packexp.data import Dataset, cifar10, synthetic
from packexp.data import digits as digits_source

if TYPE_CHECKING:
    from packexp.packing import DeviceData

FEATURES_TRAIN_SIZE = 300


def features(train_size: int = FEATURES_TRAIN_SIZE) -> Dataset:
    """Random float features: ``train_size`` rows of 12 in 4 classes, 64 for validation."""
    return synthetic.load(shape=[12], num_classes=4, train_size=train_size, val_size=64)


def digits() -> Dataset:
    """scikit-learn's digits as ``dataset=digits`` loads them by default."""
    return digits_source.load()


def small_images() -> Dataset:
    """Random uint8 images: 60 of 8x8x1 in 3 classes for training, 16 for validation."""
    return synthetic.load(shape=[8, 8, 1], num_classes=3, train_size=60, val_size=16)


def device(dataset: Dataset) -> DeviceData:
    """``dataset`` on the device (imports TensorFlow)."""
    from packexp.packing import DeviceData

    return DeviceData(dataset)


CIFAR_TRAIN_PER_BATCH, CIFAR_TEST_SIZE = 10, 6


class _Py2Pickler(pickle._Pickler):
    """Pickles as the real archive was written: Python 2 strings (bytes under Python 3)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj: bytes) -> None:
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)

    dispatch[bytes] = save_bytes
    dispatch[str] = lambda self, obj: self.save_bytes(obj.encode("latin1"))


def py2_pickle(obj: object, path: Path) -> None:
    with open(path, "wb") as f:
        _Py2Pickler(f, protocol=2).dump(obj)
    # numpy 1, which wrote the archive, named the module without the underscore.
    path.write_bytes(path.read_bytes().replace(b"cnumpy._core.", b"cnumpy.core."))


def fake_cifar10(root: Path) -> SimpleNamespace:
    """A tiny CIFAR-10 in the real format under ``root``, as a folder and as the .tar.gz,
    with its arrays."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    arrays = {}
    for name in (*cifar10.TRAIN_BATCHES, "test_batch"):
        n = CIFAR_TEST_SIZE if name == "test_batch" else CIFAR_TRAIN_PER_BATCH
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.permutation(10)[:n].tolist()
        arrays[name] = (data, labels)
        py2_pickle({"batch_label": f"{name} of 5", "labels": labels, "data": data,
                    "filenames": [f"img_{i}.png" for i in range(n)]}, folder / name)
    py2_pickle({"num_cases_per_batch": CIFAR_TRAIN_PER_BATCH, "num_vis": 3072,
                "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                "horse", "ship", "truck"]}, folder / "batches.meta")
    tar = root / "cifar-10-python.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(folder, arcname="cifar-10-batches-py")
    return SimpleNamespace(
        root=root, folder=folder, tar=tar, arrays=arrays,
        y_train=np.concatenate([arrays[n][1] for n in cifar10.TRAIN_BATCHES]),
        x_train_rows=np.concatenate([arrays[n][0] for n in cifar10.TRAIN_BATCHES]),
    )


_COLORS = {"cat": (255, 0, 0), "dog": (0, 255, 0), "emu": (0, 0, 255)}


def fake_image_folder(folder: Path) -> Path:
    """Three classes ("cat" red, "dog" green, "emu" blue) of four PNG and JPEG files each,
    beside a text file in each and a hidden folder."""
    from PIL import Image  # Pillow: matplotlib's dependency

    for name, color in _COLORS.items():
        d = folder / name
        d.mkdir(parents=True)
        Image.new("RGB", (20, 10), color).save(d / "a.png")
        Image.new("RGB", (16, 16), color).save(d / "b.jpg", quality=95)
        Image.new("RGBA", (9, 13), (*color, 255)).save(d / "c.png")
        Image.new("RGB", (12, 8), color).save(d / "d.JPEG", quality=95)
        (d / "notes.txt").write_text("not an image")
    (folder / ".ipynb_checkpoints").mkdir()
    return folder


def photo_folder(root: Path, classes: int = 3, per_class: int = 20, size: int = 24) -> Path:
    """Noisy photos of ``classes`` colours, PNG and JPEG alternately, of a few sizes."""
    from PIL import Image  # Pillow: matplotlib's dependency

    rng = np.random.default_rng(0)
    for c in range(classes):
        d = root / f"class{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            side = size + i % 3
            pixels = rng.integers(0, 256, (side, side + 2, 3), dtype=np.uint8)
            pixels[..., c] = 200
            suffix = ".png" if i % 2 else ".jpg"
            Image.fromarray(pixels).save(d / f"{i:03d}{suffix}")
    return root


def fake_tfrecords(folder: Path, shards: int = 2) -> Path:
    """The images of ``fake_image_folder`` as ``tf.train.Example`` records (encoded bytes
    under ``image``, the class under ``label``) spread over ``shards`` TFRecord files."""
    import tensorflow as tf

    images = fake_image_folder(folder / "images")
    files = sorted(f for f in images.rglob("*") if f.suffix.lower() in (".png", ".jpg", ".jpeg"))
    classes = sorted({f.parent.name for f in files})
    writers = [tf.io.TFRecordWriter(str(folder / f"part-{i}.tfrecord")) for i in range(shards)]
    for i, f in enumerate(files):
        example = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f.read_bytes()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(
                value=[classes.index(f.parent.name)]))}))
        writers[i % shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    return folder


def fake_arrays(path: Path) -> Path:
    """A .npz of 18 uint8 8x8x1 images in three classes, written to ``path``."""
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 256, size=(18, 8, 8, 1), dtype=np.uint8),
             y=np.repeat([0, 1, 2], 6))
    return path


FAKE_TABLE_TARGET = "label"


def fake_table(path: Path) -> Path:
    """A CSV of 18 rows: four numeric features and string labels in ``FAKE_TABLE_TARGET``."""
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(18, 4)), columns=["a", "b", "c", "d"])
    frame[FAKE_TABLE_TARGET] = np.repeat(["cat", "dog", "emu"], 6)
    frame.to_csv(path, index=False)
    return path


