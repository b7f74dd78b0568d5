"""CIFAR-10 from its python-pickle archive, as the .tar.gz or its extracted folder; no download."""

from __future__ import annotations

import os
import pickle
import tarfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from packexp.data import Dataset, split
from packexp.errors import ConfigError, positive_int

ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
URL = "https://www.cs.toronto.edu/~kriz/cifar.html"

# Everything a reader of a broken archive or pickle can raise, short of a bug of ours.
_CORRUPT = (tarfile.TarError, OSError, EOFError, zlib.error, pickle.UnpicklingError, ValueError,
            KeyError, IndexError, TypeError, AttributeError, ImportError, OverflowError,
            MemoryError)  # a corrupt pickle can ask for an absurd allocation


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR-10 batch holds, so a foreign pickle cannot run code."""

    ALLOWED = frozenset({
        ("numpy", "ndarray"), ("numpy", "dtype"),
        # The archive was written by Python 2 and numpy 1; numpy 2 keeps these importable.
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    })

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        return super().find_class(module, name)


def load(
    path: str | None = None,
    val_fraction: float | None = None,
    seed: int = 0,
    limit: int | None = None,
) -> Dataset:
    """Loads CIFAR-10: 50000 training and 10000 test 32x32 RGB images in 10 classes.

    Args:
        path: ``cifar-10-python.tar.gz``, its extracted ``cifar-10-batches-py`` folder, or a
            folder holding either.
        val_fraction: None validates on the test batch; a share instead holds out a seeded,
            stratified part of the training batches.
        seed: Seed of the split when ``val_fraction`` is set.
        limit: Keep only the first ``limit`` training examples (before any split).

    Returns:
        uint8 ``[n, 32, 32, 3]`` images and int32 labels.
    """
    positive_int("dataset.limit", limit, optional=True, error=ConfigError)
    source = _find(path)
    wanted = TRAIN_BATCHES if val_fraction is not None else (*TRAIN_BATCHES, TEST_BATCH)
    batches = dict(_read(source, wanted))
    x_train = np.concatenate([batches[name][0] for name in TRAIN_BATCHES])
    y_train = np.concatenate([batches[name][1] for name in TRAIN_BATCHES])
    if limit is not None:
        x_train, y_train = x_train[:limit], y_train[:limit]
    if val_fraction is not None:
        return split("cifar10", x_train, y_train, val_fraction, seed, num_classes=10)
    x_val, y_val = batches[TEST_BATCH]
    return Dataset("cifar10", x_train, y_train, x_val, y_val, num_classes=10)


def _find(path: str | None) -> str:
    """The archive file or the folder of batch files that ``path`` points at."""
    if path is not None:
        path = os.path.expanduser(str(path))
        if os.path.isfile(path):
            return path
        if os.path.isdir(path):
            for candidate in (os.path.join(path, FOLDER), os.path.join(path, ARCHIVE)):
                if os.path.exists(candidate):
                    return candidate
            if os.path.basename(os.path.normpath(path)) == FOLDER or any(
                os.path.exists(os.path.join(path, name)) for name in (*TRAIN_BATCHES, TEST_BATCH)
            ):
                return path
    raise ConfigError(
        f"dataset.path={path}: CIFAR-10 not found; download {ARCHIVE} from {URL} and pass its "
        f"path (or the extracted {FOLDER} folder) as dataset.path=..."
    )


def _read(
    source: str, wanted: tuple[str, ...]
) -> Iterator[tuple[str, tuple[np.ndarray, np.ndarray]]]:
    """Yields ``(batch name, (images, labels))`` for each wanted batch in ``source``."""
    if os.path.isdir(source):
        for name in wanted:
            file = os.path.join(source, name)
            if not os.path.isfile(file):
                raise _corrupt(file, "missing batch file")
            try:
                with open(file, "rb") as f:
                    yield name, _decode(f)
            except _CORRUPT as e:
                raise _corrupt(file, e) from None
        return
    found = set()
    try:
        # Streamed in archive order: seeking back in a .tar.gz would decompress it again.
        with tarfile.open(source, "r:gz") as tar:
            for member in tar:
                name = os.path.basename(member.name)
                if member.isfile() and name in wanted and name not in found:
                    found.add(name)
                    try:
                        yield name, _decode(tar.extractfile(member))
                    except _CORRUPT as e:
                        raise ValueError(f"{member.name}: {_one_line(e)}") from None
    except _CORRUPT as e:
        raise _corrupt(source, e) from None
    missing = [name for name in wanted if name not in found]
    if missing:
        raise _corrupt(source, f"no {', '.join(missing)}")


def _decode(f: IO[bytes]) -> tuple[np.ndarray, np.ndarray]:
    batch = _BatchUnpickler(f, encoding="bytes").load()
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"data is {data.dtype} {list(data.shape)}, expected uint8 [n, 3072]")
    if labels.shape != (len(data),) or not np.isin(labels, np.arange(10)).all():
        raise ValueError(f"labels are not {len(data)} integers in 0..9")
    # Rows are channel-major: 1024 red, then green, then blue bytes, each 32 rows of 32.
    images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels.astype(np.int32)


def _corrupt(file: str, reason: Exception | str) -> ConfigError:
    return ConfigError(
        f"dataset.path: {file}: not a valid CIFAR-10 python archive ({_one_line(reason)})"
    )


def _one_line(reason: Exception | str) -> str:
    """The reason on one line, with the exception type where its message alone is unclear."""
    text = " ".join(str(reason).split())
    if isinstance(reason, Exception) and not isinstance(reason, ValueError):
        text = f"{type(reason).__name__}: {text}" if text else type(reason).__name__
    return text
