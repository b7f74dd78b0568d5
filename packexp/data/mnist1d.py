"""MNIST-1D (Greydanus 2020): the ten digits as 40-point 1-D signals, made procedurally by the
``mnist1d`` package from the templates it ships (``mnist1d.data.make_dataset``); nothing is
downloaded. Configurations differ widely on it (MLPs near 0.6-0.7, small 1-D CNNs near 0.9,
its authors report), where digits lets almost any reach 0.97-0.99.

Made once per setting and seed and kept as ``.npz`` under ``cache_dir``: making 5,000
examples takes about a second."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from packexp.data import Dataset
from packexp.errors import flag, positive_int
from packexp.files import atomic_file

# Bumped when the arrays made for the same settings change, so kept files are remade.
VERSION = 1


def load(num_samples: int = 5000, train_split: float = 0.8,
         cache_dir: str | None = "outputs/data", seed: int = 0,
         sequences: bool = False) -> Dataset:
    """MNIST-1D: ``train_split`` of ``num_samples`` signals to train on, the rest to validate.

    Args:
        num_samples: Examples in all, an equal number per digit (the package's default: 5000,
            so 4,000 to train and 1,000 to validate).
        train_split: The share trained on; validation is the package's own test split.
        cache_dir: Where the made arrays are kept (relative to the directory the command
            runs in); null makes them every time.
        seed: The package's seed: the signals' shifts, scales, shears and noise.
        sequences: Give each signal as a sequence ``[40, 1]`` (40 steps of one feature), as
            Conv1D, recurrent and attention layers take it, instead of 40 features.
    """
    positive_int("num_samples", num_samples, 20, why=" (two per digit)")
    flag("sequences", sequences)
    if not 0 < train_split < 1:
        raise ValueError(f"train_split={train_split!r}: must be between 0 and 1")
    kept = _kept_file(cache_dir, num_samples, train_split, seed)
    if kept is not None and kept.is_file():
        with np.load(kept, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    else:
        arrays = _make(num_samples, train_split, seed)
        if kept is not None:  # whole or not at all: runs starting together may read it
            with atomic_file(kept) as f:
                np.savez(f, **arrays)
    x, x_val = (arrays[k].astype(np.float32) for k in ("x", "x_test"))
    if sequences:
        x, x_val = x[..., None], x_val[..., None]
    return Dataset(name="mnist1d", x_train=x, y_train=arrays["y"].astype(np.int32), x_val=x_val,
                   y_val=arrays["y_test"].astype(np.int32), num_classes=10)


def _make(num_samples: int, train_split: float, seed: int) -> dict[str, np.ndarray]:
    """The package's arrays; its global seeding (Python's and NumPy's) is undone after."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.train_split, args.seed = num_samples, train_split, seed
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        made = make_dataset(args)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
    return {k: made[k] for k in ("x", "y", "x_test", "y_test")}


def _kept_file(cache_dir: str | None, num_samples: int, train_split: float,
               seed: int) -> Path | None:
    if not cache_dir:
        return None
    from hydra.utils import to_absolute_path

    try:  # relative to where the command started; outside a Hydra app, to here
        directory = Path(to_absolute_path(str(cache_dir)))
    except ValueError:
        directory = Path(cache_dir).resolve()
    return directory / f"mnist1d-v{VERSION}-n{num_samples}-split{train_split:g}-seed{seed}.npz"
