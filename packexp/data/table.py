"""A user's table: numeric feature columns and a label column, from a CSV or Parquet file."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from packexp.data import Dataset
from packexp.data.arrays import check_classes, check_stratifiable, from_arrays
from packexp.data.shards import StreamedTable, files_of, groups_of, moments
from packexp.data.streamed import check_cache, check_stream_keys, fits_memory, stratified
from packexp.errors import ConfigError

log = logging.getLogger(__name__)

FORMATS = {".csv": "CSV", ".parquet": "Parquet", ".pq": "Parquet"}
# How a pandas index written with the data is named: DataFrame.to_csv's first column has an
# empty header, which read_csv calls "Unnamed: 0"; pyarrow keeps a Parquet file's index that
# is not a plain range as a column of its own.
INDEX_NAMES = ("Unnamed: 0", "", "__index_level_0__")


def load(
    path: str | None = None,
    target: str | None = None,
    features: Sequence[str] | None = None,
    val_fraction: float = 0.2,
    standardize: bool = True,
    seed: int = 0,
    regression: bool = False,
    cache: str = "auto",
    memory_share: float = 0.25,
    block: int = 512,
    epoch_size: int | None = None,
    standardize_target: bool = True,
) -> Dataset | StreamedTable:
    """Loads a table whose ``target`` column holds the labels; classes are its sorted values
    (with ``regression``, the target column's real values).

    Args:
        path: A ``.csv`` file with a header line, or a ``.parquet``/``.pq`` file.
        target: The label column: integers or strings.
        features: The numeric feature columns; None takes every other column, in file order.
        val_fraction: Share held out for validation, stratified by class.
        standardize: Scale each feature by the training split's mean and std.
        seed: Seed of the split.
        regression: The target column holds real values, not classes: float32 targets, a
            random split (``objective=regression`` sets it).
        cache: ``memory`` reads the table into memory; ``none`` streams it a group at a time
            (a Parquet row group, a CSV file); ``auto`` keeps it in memory when its features
            as float32 take at most ``memory_share`` of the memory available. ``path`` may
            then be a folder of shards or a glob.
        memory_share, block, epoch_size: As ``dataset=image_folder``'s.
        standardize_target: A regression's targets scaled by the training split's mean and
            std (metrics are still reported in their own units); a streamed table's are
            trained on as given.

    Returns:
        float32 ``[n, len(features)]`` features and int32 labels, as
        ``packexp.data.arrays.from_arrays`` gives for the same values.
    """
    check_cache(cache)
    check_stream_keys(memory_share, block, 1, epoch_size, cache)
    files = files_of(path)
    if cache != "none" and epoch_size is None and (cache == "memory" or fits_memory(
            _size_of(files), memory_share)):
        if len(files) > 1:
            raise ConfigError(f"dataset.path={path}: {len(files)} shards are streamed; give "
                              "dataset.cache=none (or auto), or one file to read into memory")
        return _in_memory(path, target, features, val_fraction, standardize, seed, regression,
                          standardize_target)
    return _streamed(files, target, features, val_fraction, standardize, seed, regression,
                     block, epoch_size)


def _size_of(files: Sequence[Path]) -> int:
    """A bound on the features' size in memory: a Parquet file's values at 8 bytes, a CSV's
    size on disk (a number's text is longer than its float32); 0 for a file of another kind
    (refused where it is read)."""
    total = 0
    for f in files:
        if FORMATS.get(f.suffix.lower()) == "Parquet":
            import pyarrow.parquet as pq

            try:
                meta = pq.ParquetFile(f).metadata
            except (OSError, ValueError):
                continue  # refused, with its reason, where it is read
            total += meta.num_rows * meta.num_columns * 8
        elif FORMATS.get(f.suffix.lower()) == "CSV":
            total += f.stat().st_size
    return total


def _streamed(files: Sequence[Path], target: str | None, features: Sequence[str] | None,
              val_fraction: float, standardize: bool, seed: int, regression: bool, block: int,
              epoch_size: int | None) -> StreamedTable:
    """The shards as a ``StreamedTable``: labels, the split and the training split's
    moments read (and every value checked) in one pass, a group at a time."""
    if target is None:
        raise ConfigError(f"dataset.target=None: name the label column of {files[0]} as "
                          "dataset.target=...")
    target = str(target)
    groups, labels, columns = groups_of(files, target)
    index = _index_column(columns, target, features)
    if index is not None and _dropped(index, groups[0].read([index])[index], str(files[0])):
        columns = [c for c in columns if c != index]
    names = _feature_names(pd.DataFrame(columns=columns), target, features, str(files[0]))
    if regression:
        y = labels.astype(np.float32)
        num_classes = 1
    else:
        labels = labels.astype(str) if labels.dtype == object else labels
        check_classes(labels, f"dataset.target={target}")
        classes, y = np.unique(labels, return_inverse=True)
        y, num_classes = y.astype(np.int32), len(classes)
        if num_classes < 2:
            raise ConfigError(f"dataset.target={target}: one class ({classes[0]!r}); a "
                              "classifier needs at least two")
        check_stratifiable(classes, np.bincount(y, minlength=num_classes), val_fraction,
                           f"dataset.target={target}")
    train, val = stratified(y, val_fraction, seed, by_class=not regression)
    table = StreamedTable("table", tuple(groups), tuple(names), y, np.sort(train),
                          np.sort(val), num_classes, seed=seed, block=block,
                          epoch_size=epoch_size, regression=regression)
    mean, std = moments(table)  # every value checked, standardised or not
    return dataclasses.replace(table, mean=mean, std=std) if standardize else table


def _in_memory(path: str | None, target: str | None, features: Sequence[str] | None,
               val_fraction: float, standardize: bool, seed: int, regression: bool,
               standardize_target: bool) -> Dataset:
    source = f"dataset.path={path}"
    frame = _read(path, source)
    columns = ", ".join(frame.columns)
    if target is None:
        raise ConfigError(f"dataset.target=None: name the label column of {path} as "
                          f"dataset.target=...; its columns: {columns}")
    target = str(target)  # dataset.target=0 on the command line is an int; headers are text
    if target not in frame.columns:
        raise ConfigError(f"dataset.target={target}: no such column in {path}; its columns: "
                          f"{columns}")
    index = _index_column(list(frame.columns), target, features)
    if index is not None and _dropped(index, frame[index], str(path)):
        frame = frame.drop(columns=index)
    names = _feature_names(frame, target, features, path)
    for name in names:
        if not pd.api.types.is_numeric_dtype(frame[name]):
            numeric = ",".join(c for c in names if pd.api.types.is_numeric_dtype(frame[c]))
            raise ConfigError(
                f"{source}: column {name!r} is not numeric (e.g. {frame[name].iloc[0]!r}); "
                f"encode it as numbers, or leave it out with dataset.features=[{numeric}]")
    _say_booleans(frame, names, source)
    x = frame[names].to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(x)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        value = "a missing value" if np.isnan(x[row, column]) else x[row, column]
        raise ConfigError(f"{source}: column {names[column]!r} has {value} at {_row(path, row)}; "
                          "fill in or drop that row")
    missing = np.flatnonzero(frame[target].isna())
    if missing.size:
        raise ConfigError(f"dataset.target={target}: missing label at {_row(path, missing[0])} of "
                          f"{path}")
    return from_arrays(x, frame[target].to_numpy(), name="table", source=source,
                       val_fraction=val_fraction, standardize=standardize, seed=seed,
                       regression=regression, standardize_target=standardize_target)


def _say_booleans(frame: pd.DataFrame, names: Sequence[str], source: str) -> None:
    """One line naming the True/False feature columns, which train as 1/0: a flag a user may
    have meant as a label or left in by mistake is a feature, and is said to be."""
    flags = [n for n in names if pd.api.types.is_bool_dtype(frame[n])]
    if flags:
        kept = ",".join(n for n in names if n not in flags)
        log.warning("%s: True/False column%s %s used as 1/0 features; to leave %s out: "
                    "dataset.features=[%s]", source, "s" if len(flags) > 1 else "",
                    ", ".join(map(repr, flags)), "them" if len(flags) > 1 else "it", kept)


def _read(path: str | None, source: str) -> pd.DataFrame:
    file = Path(path).expanduser() if path is not None else None
    if file is None or not file.is_file():
        raise ConfigError(f"{source}: {'no file' if file is None else 'no such file'}; pass a "
                          "CSV (.csv) or Parquet (.parquet, .pq) file as dataset.path=...")
    kind = FORMATS.get(file.suffix.lower())
    if kind is None:
        raise ConfigError(f"{source}: unknown suffix {file.suffix!r}; dataset=table reads .csv, "
                          ".parquet and .pq files (dataset=arrays reads .npz)")
    try:
        # round_trip: the floats a CSV holds, to the last bit, as np.savetxt or to_csv wrote them.
        frame = (pd.read_csv(file, float_precision="round_trip") if kind == "CSV"
                 else pd.read_parquet(file, engine="pyarrow"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{source}: cannot read as {kind} "
                          f"({' '.join(str(e).split()) or type(e).__name__})") from None
    if frame.empty:
        raise ConfigError(f"{source}: no rows")
    frame.columns = [str(c) for c in frame.columns]
    return frame


def _index_column(columns: Sequence[str], target: str,
                  features: Sequence[str] | None) -> str | None:
    """The column that may be a pandas index written with the table: the first, unnamed, or
    pyarrow's index column; None where the features are chosen (a chosen column is meant)."""
    if features is not None:
        return None
    named = [c for c in columns if c == INDEX_NAMES[-1]]
    index = named[0] if named else (columns[0] if columns and columns[0] in INDEX_NAMES
                                    else None)
    return None if index == target else index


def _dropped(name: str, values: pd.Series, path: str) -> bool:
    """Whether the unnamed column ``name`` holds a row index (distinct integers), which a
    model would learn the row order from (a file sorted by label leaks the label): dropped,
    with one warning naming the file and the column."""
    if not (pd.api.types.is_integer_dtype(values) and values.is_unique):
        return False
    log.warning("dataset.path=%s: dropped column %r, a pandas index (%d..%d; DataFrame.to_csv "
                "writes one unless index=False); dataset.features=[...] naming it keeps it",
                path, name, values.min(), values.max())
    return True


def _feature_names(frame: pd.DataFrame, target: str, features: Sequence[str] | None,
                   path: str | None) -> list[str]:
    if features is None:
        names = [c for c in frame.columns if c != target]
        if not names:
            raise ConfigError(f"dataset.path={path}: no column besides the target {target!r}")
        return names
    if isinstance(features, str) or not isinstance(features, Sequence) or not features:
        raise ConfigError(f"dataset.features={features!r}: must be a list of column names, e.g. "
                          "dataset.features=[a,b], or null for every column but the target")
    names = [str(f) for f in features]
    unknown = [n for n in names if n not in frame.columns]
    if unknown:
        raise ConfigError(f"dataset.features: no column {unknown[0]!r} in {path}; its columns: "
                          f"{', '.join(frame.columns)}")
    if target in names:
        raise ConfigError(f"dataset.features: lists the target {target!r}; a model must not "
                          "see its labels")
    return names


def _row(path: str, row: int) -> str:
    """A data row (from 0) as the user finds it; a CSV's line number counts the header too."""
    return f"row {row} (line {row + 2})" if Path(path).suffix.lower() == ".csv" else f"row {row}"
