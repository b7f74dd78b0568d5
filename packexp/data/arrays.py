"""A user's arrays: features, sequences or uint8 images and their labels, from .npz or memory."""

from __future__ import annotations

import dataclasses
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from packexp.data import Dataset, Scaling, split, split_values
from packexp.errors import ConfigError, flag

KEYS = ("x", "y", "x_val", "y_val")
SHAPES = ("[n, features] numbers, [n, steps, features] sequences of numbers or [n, height, width, "
          "channels] uint8 images")
SAVE = "np.savez(path, x=..., y=...)"
REGRESSION = "objective=regression"  # what makes a search read real-valued targets


def load(
    path: str | None = None,
    val_fraction: float = 0.2,
    standardize: bool = True,
    seed: int = 0,
    regression: bool = False,
    standardize_target: bool = True,
) -> Dataset:
    """Loads the arrays ``x`` and ``y`` (and optionally ``x_val``, ``y_val``) of a .npz file.

    Args:
        path: A file written by ``np.savez(path, x=..., y=...)``; ``x`` as ``from_arrays``
            takes it.
        val_fraction: Share held out for validation, stratified by class, when the file has
            no ``x_val``.
        standardize: Scale each feature by the training split's mean and std (a sequence's
            over its examples and steps; not images).
        seed: Seed of the split.
        regression: ``y`` holds real values, not classes (``objective=regression`` sets it).
        standardize_target: A regression's targets scaled by the training split's mean and
            std; its metrics are still reported in the targets' own units.
    """
    source = f"dataset.path={path}"
    if path is None or not Path(path).expanduser().is_file():
        raise ConfigError(f"{source}: {'no file' if path is None else 'no such file'}; pass a "
                          ".npz holding x and y (and optionally x_val, y_val) as "
                          "dataset.path=...")
    try:
        archive = np.load(Path(path).expanduser(), allow_pickle=False)
    except (OSError, ValueError, EOFError):
        archive = None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ConfigError(f"{source}: not a .npz archive; write one with {SAVE}")
    with archive:
        missing = [k for k in ("x", "y") if k not in archive.files]
        if missing:
            raise ConfigError(f"{source}: no array {missing[0]!r} in the file (it holds "
                              f"{', '.join(archive.files) or 'none'}); write it with {SAVE}")
        arrays = {}
        for key in (k for k in KEYS if k in archive.files):
            try:
                arrays[key] = archive[key]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                # Pickles stay off (one can run code), so an array of Python objects fails here.
                raise ConfigError(f"{source}: cannot read array {key!r} "
                                  f"({' '.join(str(e).split())})") from None
    return from_arrays(**arrays, name="arrays", source=source, val_fraction=val_fraction,
                       standardize=standardize, seed=seed, regression=regression,
                       standardize_target=standardize_target)


def from_arrays(
    x: Any,
    y: Any,
    x_val: Any = None,
    y_val: Any = None,
    *,
    name: str,
    source: str,
    val_fraction: float = 0.2,
    standardize: bool = True,
    seed: int = 0,
    regression: bool = False,
    standardize_target: bool = True,
) -> Dataset:
    """A Dataset of checked arrays; every problem is a one-line ConfigError naming ``source``.

    Args:
        x: ``[n, d]`` numeric features, ``[n, steps, d]`` numeric sequences or
            ``[n, h, w, c]`` uint8 images.
        y: ``[n]`` labels, integers or strings; classes are their sorted distinct values.
        x_val: Validation inputs, given with ``y_val``; without them a stratified
            ``val_fraction`` of ``x`` is held out.
        y_val: Validation labels.
        name: The Dataset's name.
        source: Where the arrays come from, as error messages name it.
        val_fraction: Share held out for validation when ``x_val`` is not given.
        standardize: Scale each feature by the training split's mean and std (a sequence's
            over its examples and steps; not images).
        seed: Seed of the split.
        regression: ``y`` (and ``y_val``) are real-valued targets: float32, split at random
            (not stratified).
        standardize_target: With ``regression``, ``y`` and ``y_val`` scaled by the training
            targets' mean and std (``Dataset.targets``), so that every member trains on
            targets of unit scale; ignored for classes.

    Returns:
        float32 features or sequences (or the uint8 images as given) and int32 labels in
        ``0..k-1``, or with ``regression`` float32 targets (standardised ones with
        ``standardize_target``).
    """
    flag("standardize", standardize)
    flag("standardize_target", standardize_target)
    if (x_val is None) != (y_val is None):
        given, missing = ("x_val", "y_val") if y_val is None else ("y_val", "x_val")
        raise ConfigError(f"{source}: {given} without {missing}; give both or neither")
    x, y = _inputs(x, "x", source), _labels(y, "y", len(x), source)
    if x_val is not None:
        x_val = _inputs(x_val, "x_val", source)
        y_val = _labels(y_val, "y_val", len(x_val), source)
        if x_val.shape[1:] != x.shape[1:]:
            raise ConfigError(f"{source}: x_val has shape {x_val.shape} and x {x.shape}; "
                              "their rows must have the same shape")
    if regression:
        y, y_val = _values(y, "y", source), None if y_val is None else _values(y_val, "y_val",
                                                                               source)
        data = (split_values(name, x, y, val_fraction, seed) if x_val is None
                else Dataset(name, x, y, x_val, y_val, num_classes=1, regression=True))
        data = _standardized(data) if standardize and x.dtype != np.uint8 else _as_float32(data)
        return _standardized_targets(data) if standardize_target else data
    classes, codes = _classes(y, y_val, source)
    if x_val is None:
        data = _split(name, x, codes[: len(y)], classes, val_fraction, seed, source)
    else:
        data = Dataset(name, x, codes[: len(y)], x_val, codes[len(y):], len(classes))
    return _standardized(data) if standardize and x.dtype != np.uint8 else _as_float32(data)


def _inputs(x: Any, key: str, source: str) -> np.ndarray:
    """``x`` as float64 features or sequences, or uint8 images, checked."""
    x = np.asarray(x)
    if x.size == 0:
        raise ConfigError(f"{source}: {key} is empty (shape {x.shape})")
    if x.dtype.kind not in "biuf":
        raise ConfigError(f"{source}: {key} has dtype {x.dtype}; must be {SHAPES}")
    if x.ndim == 4 and x.dtype == np.uint8:
        return x
    if x.ndim not in (2, 3) or (x.ndim == 3 and x.dtype == np.uint8):
        raise ConfigError(f"{source}: {key} has shape {x.shape} and dtype {x.dtype}; must be "
                          f"{SHAPES}{reshape_hint(x.shape, x.dtype, key)}")
    x = x.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        where = np.argwhere(bad)[0]
        axes = ("row", "column") if x.ndim == 2 else ("row", "step", "feature")
        at = ", ".join(f"{axis} {i}" for axis, i in zip(axes, where, strict=True))
        raise ConfigError(f"{source}: {key} has {x[tuple(where)]} at {at}; features must be "
                          "finite numbers")
    return x


def reshape_hint(shape: tuple[int, ...], dtype: Any, key: str = "x") -> str:
    """What makes inputs of ``shape`` and ``dtype``, which ``from_arrays`` refuses, inputs it
    takes: "; " and the NumPy expression that does it."""
    if len(shape) <= 1:
        return f"; give one row per example, e.g. {key}[:, None] for a single feature"
    if len(shape) == 3:  # uint8 only: numbers of any other type are sequences
        return (f"; a uint8 [n, height, width] reads as images: add a channel axis with "
                f"{key}[..., None] (sequences are floats: {key}.astype(np.float32))")
    if len(shape) == 4:
        made = (f"{key}.astype(np.uint8)" if np.dtype(dtype).kind in "biu" else
                f"({key} * 255).round().astype(np.uint8) from values in [0, 1]")
        sequences = f"; for sequences [n, steps, features], {key}[..., 0]" if shape[-1] == 1 else ""
        return f"; images are uint8: {made}{sequences}"
    return f"; flatten each example into features with {key}.reshape(len({key}), -1)"


def _labels(y: Any, key: str, rows: int, source: str) -> np.ndarray:
    """``y`` as a 1-D array of numbers or strings, one per row, none missing."""
    # NumPy would turn a list of strings and numbers into all strings; objects keep the mix.
    y = np.asarray(y, dtype=object) if isinstance(y, list | tuple) else np.asarray(y)
    if y.ndim != 1 or len(y) != rows:
        raise ConfigError(f"{source}: {key} has shape {y.shape}; must be 1-D, one label per row "
                          f"of x{key[1:]} ({rows})")
    if y.dtype.kind == "O":
        missing = [i for i, v in enumerate(y) if v is None or (isinstance(v, float) and v != v)]
        if missing:
            raise ConfigError(f"{source}: {key} has a missing label at row {missing[0]}")
        text = [isinstance(v, str) for v in y]
        if any(text) and not all(text):
            raise ConfigError(f"{source}: {key} mixes strings and other values; labels must be "
                              "all numbers or all strings")
        y = y.astype(str) if all(text) else np.array(y.tolist())
    if y.dtype.kind not in "biufUS":
        raise ConfigError(f"{source}: {key} has dtype {y.dtype}; labels must be integers or "
                          "strings")
    if y.dtype.kind == "f" and np.isnan(y).any():
        raise ConfigError(f"{source}: {key} has a missing label (nan) at row "
                          f"{np.flatnonzero(np.isnan(y))[0]}")
    return y


def _values(y: np.ndarray, key: str, source: str) -> np.ndarray:
    """Real-valued targets as float32, every one a finite number."""
    if y.dtype.kind not in "biuf":
        raise ConfigError(f"{source}: {key} has {y.dtype} values; a regression's targets must "
                          "be numbers")
    y = y.astype(np.float64)
    if not np.isfinite(y).all():
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ConfigError(f"{source}: {key} has {y[row]} at row {row}; a regression's targets "
                          "must be finite numbers")
    return y.astype(np.float32)


def _classes(y: np.ndarray, y_val: np.ndarray | None, source: str) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct labels of ``y`` and ``y_val``, and every label's index among them."""
    if y_val is not None and (y.dtype.kind in "US") != (y_val.dtype.kind in "US"):
        raise ConfigError(f"{source}: y has {y.dtype} labels and y_val {y_val.dtype}; both must "
                          "be numbers or both strings")
    labels = y if y_val is None else np.concatenate([y, y_val])
    check_classes(labels, source)
    classes, codes = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ConfigError(f"{source}: the labels have one class ({_show(classes[0])}); a "
                          "classifier needs at least 2")
    return classes, codes.astype(np.int32)


def _split(name: str, x: np.ndarray, y: np.ndarray, classes: np.ndarray, val_fraction: float,
           seed: int, source: str) -> Dataset:
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction!r}: must be between 0 and 1")
    check_stratifiable(classes, np.bincount(y, minlength=len(classes)), val_fraction, source)
    try:
        return split(name, x, y, val_fraction, seed, num_classes=len(classes))
    except ValueError as e:
        raise ConfigError(f"{source}: cannot hold out val_fraction={val_fraction} of {len(y)} "
                          f"examples stratified by class: {' '.join(str(e).split())}") from None


def check_classes(labels: np.ndarray, source: str) -> None:
    """Refuses labels that are real numbers, not classes: a regression's target read by a
    classifier, which ``objective=regression`` reads as one."""
    if labels.dtype.kind == "f":
        real = labels[labels != np.round(labels)]
        if real.size:
            raise ConfigError(f"{source}: the labels are real numbers ({len(np.unique(labels))} "
                              f"distinct values, e.g. {real[0]:g}), not classes; for a "
                              f"regression add {REGRESSION}")


def check_stratifiable(classes: np.ndarray, counts: np.ndarray, val_fraction: float,
                       source: str) -> None:
    """Refuses, in one line, classes that a stratified split of ``val_fraction`` cannot hold
    out one of each (scikit-learn's own conditions), with a hint where the labels are
    numbers: many classes of a few examples each are most often a real-valued target."""
    if not 0 < val_fraction < 1:
        return  # refused where it is read, with its own line
    n = int(counts.sum())
    held = math.ceil(val_fraction * n)
    if counts.min() < 2:
        why = f"the smallest class, {_show(classes[counts.argmin()])}, has {counts.min()}"
    elif min(held, n - held) < len(classes):
        why = f"{min(held, n - held)} examples for {len(classes)} classes"
    else:
        return
    hint = (f"; if the labels are a real-valued target ({len(classes)} distinct numbers), add "
            f"{REGRESSION}" if classes.dtype.kind in "biuf" else "")
    raise ConfigError(f"{source}: cannot hold out val_fraction={val_fraction} of {n} examples "
                      f"stratified by class ({why}){hint}")


def _standardized(data: Dataset) -> Dataset:
    # The training split's statistics only: the validation score must not see its own data.
    # In float32, as the kept model's first layer computes it (``Scaling``). A sequence's
    # features are scaled alike at every step, as keras.layers.Normalization scales the last
    # axis: its moments are over the examples and the steps.
    scaling = Scaling.fitted(data.x_train.reshape(-1, data.x_train.shape[-1]))
    return dataclasses.replace(data, x_train=scaling(data.x_train), x_val=scaling(data.x_val),
                               inputs=scaling)


def _standardized_targets(data: Dataset) -> Dataset:
    # Targets in their own units (the diabetes data's run from 25 to 346) make the squared
    # error's gradients, and so the learning rates that suit them, depend on those units; at
    # unit scale the search space's learning rates mean the same on every table. The training
    # split's moments only, as for the features.
    scaling = Scaling.fitted(data.y_train[:, None])  # one column: mean and std of shape [1]
    return dataclasses.replace(data, y_train=scaling(data.y_train), y_val=scaling(data.y_val),
                               targets=scaling)


def _as_float32(data: Dataset) -> Dataset:
    if data.x_train.dtype == np.uint8:
        return data
    return dataclasses.replace(data, x_train=data.x_train.astype(np.float32),
                               x_val=data.x_val.astype(np.float32))


def _show(label: Any) -> str:
    return repr(label.item() if isinstance(label, np.generic) else label)
