"""Tables in shards (Parquet row groups, CSV files) streamed a group at a time.

An epoch visits the groups in an order of its own and, within each group, its training rows
in an order of their own: both functions of the seed and the epoch alone, so that a pack
reads each group once per epoch for all its members and a member alone reads the same rows
(``packing.plain``). Memory holds one group and a block, whatever the table's size.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from packexp.data import Scaling
from packexp.errors import ConfigError
from packexp.space import derive_seed

FORMATS = {".csv": "CSV", ".parquet": "Parquet", ".pq": "Parquet"}
GROUP_STREAM, ROW_STREAM = 15485863, 32452843  # the orders' seeds, apart from others'


@dataclass(frozen=True)
class Group:
    """Rows read together: a Parquet row group, or a whole CSV file."""

    file: str
    kind: str  # CSV or Parquet
    index: int | None  # the Parquet row group; None for a CSV file
    rows: int

    def read(self, columns: Sequence[str]) -> pd.DataFrame:
        if self.kind == "CSV":
            # round_trip: the floats a CSV holds, to the last bit, as the table in memory reads
            return pd.read_csv(self.file, usecols=list(columns), float_precision="round_trip")
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.file).read_row_group(self.index,
                                                        columns=list(columns)).to_pandas()


@dataclass(frozen=True, eq=False)
class Rows:
    """A split's rows of the table's groups, as a run's record names them."""

    groups: tuple[Group, ...]
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def fingerprint(self) -> bytes:
        files = "\n".join(f"{g.file}:{g.index}:{g.rows}" for g in self.groups)
        return files.encode() + np.ascontiguousarray(self.rows).tobytes()


@dataclass(frozen=True, eq=False)
class StreamedTable:
    """A table's split as row numbers and labels, its features read a group at a time.

    Attributes:
        groups: The table's groups, in file order; row numbers count through them.
        features: The feature columns.
        y: Every row's label (int32 class, or float32 target under ``regression``).
        train_rows, val_rows: The rows of each split, ascending.
        mean, std: The training split's per-feature mean and std; None: not standardised.
    """

    name: str
    groups: tuple[Group, ...]
    features: tuple[str, ...]
    y: np.ndarray
    train_rows: np.ndarray
    val_rows: np.ndarray
    num_classes: int
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    seed: int = 0
    block: int = 512
    epoch_size: int | None = None
    regression: bool = False
    streams: bool = field(default=True, init=False)
    dtype: str = field(default="float32", init=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (len(self.features),)

    @property
    def inputs(self) -> Scaling | None:
        """The standardisation the rows are read through (``data.Scaling``); None: none."""
        return None if self.mean is None else Scaling(self.mean, self.std)

    targets = None  # a streamed regression's targets are trained on as given

    @property
    def train_size(self) -> int:
        return min(self.epoch_size or len(self.train_rows), len(self.train_rows))

    @property
    def val_size(self) -> int:
        return len(self.val_rows)

    @property
    def train(self) -> Rows:
        return Rows(self.groups, self.train_rows)

    @property
    def val(self) -> Rows:
        return Rows(self.groups, self.val_rows)

    @property
    def y_train(self) -> np.ndarray:
        return self.y[self.train_rows]

    @property
    def y_val(self) -> np.ndarray:
        return self.y[self.val_rows]

    def order(self, epoch: int) -> np.ndarray:
        """The training rows of epoch ``epoch``, in its order: group by group, each group's
        rows shuffled."""
        groups = np.random.default_rng(derive_seed(self.seed, GROUP_STREAM, epoch))
        starts = np.cumsum([0] + [g.rows for g in self.groups])
        parts = []
        for g in groups.permutation(len(self.groups)):
            lo, hi = np.searchsorted(self.train_rows, [starts[g], starts[g + 1]])
            rows = self.train_rows[lo:hi]
            rng = np.random.default_rng(derive_seed(self.seed, ROW_STREAM, epoch, int(g)))
            parts.append(rng.permutation(rows))
        return np.concatenate(parts)[:self.train_size]

    def train_blocks(self, epoch: int, start: int, stop: int) -> Iterator[tuple[Any, Any]]:
        yield from self._read(self.order(epoch)[start:stop], self.block)

    def val_blocks(self, size: int) -> Iterator[tuple[Any, Any]]:
        yield from self._read(self.val_rows, size)

    def decoded_bytes(self) -> int:
        return (len(self.train_rows) + len(self.val_rows)) * len(self.features) * 4

    def _read(self, rows: np.ndarray, size: int) -> Iterator[tuple[Any, Any]]:
        import tensorflow as tf

        for x, y in self._arrays(rows, size):
            yield tf.constant(x), tf.constant(y)

    def _arrays(self, rows: np.ndarray, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``rows`` in their order, ``size`` at a time, reading each group they pass through
        once (rows of one group follow each other in an epoch's order)."""
        starts = np.cumsum([0] + [g.rows for g in self.groups])
        of = np.searchsorted(starts, rows, side="right") - 1  # each row's group
        runs = np.flatnonzero(np.diff(of)) + 1  # where the next group's rows begin
        pending: list[np.ndarray] = []
        held, done = 0, 0
        for lo, hi in zip(np.r_[0, runs], np.r_[runs, len(rows)], strict=True):
            g = of[lo]
            x = _features(self.groups[g], self.features)[rows[lo:hi] - starts[g]]
            pending.append(x.astype(np.float32) if self.inputs is None else self.inputs(x))
            held += hi - lo
            while held >= size or (hi == len(rows) and held):
                joined = np.concatenate(pending)
                take = min(size, held)
                yield joined[:take], self.y[rows[done:done + take]]
                done += take
                pending, held = [joined[take:]], held - take


def _features(group: Group, columns: Sequence[str]) -> np.ndarray:
    """A group's feature columns as float64, every value a finite number."""
    frame = group.read(columns)
    for name in columns:
        if not pd.api.types.is_numeric_dtype(frame[name]):
            raise ConfigError(f"dataset.path: {group.file}: column {name!r} is not numeric "
                              f"(e.g. {frame[name].iloc[0]!r}); encode it as numbers, or leave "
                              "it out with dataset.features=[...]")
    x = frame[list(columns)].to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(x)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        value = "a missing value" if np.isnan(x[row, column]) else x[row, column]
        raise ConfigError(f"dataset.path: {group.file}: column {columns[column]!r} has {value} "
                          f"at its row {row}; fill in or drop that row")
    return x


def files_of(path: str | None) -> list[Path]:
    """The table's files: one file, a folder's .csv/.parquet/.pq files, or a glob's."""
    if path is None:
        raise ConfigError("dataset.path=None: no file; pass a CSV (.csv) or Parquet (.parquet, "
                          ".pq) file, a folder of them or a glob as dataset.path=...")
    root = Path(path).expanduser()
    if root.is_file():
        return [root]  # its suffix is checked where it is read
    if root.is_dir():
        found = sorted(f for f in root.iterdir() if f.suffix.lower() in FORMATS)
    else:
        found = sorted(Path(f) for f in glob.glob(str(root)))
    if not found:
        raise ConfigError(f"dataset.path={path}: no such file; pass a CSV (.csv) or Parquet "
                          "(.parquet, .pq) file, a folder of them or a glob")
    kinds = {FORMATS.get(f.suffix.lower()) for f in found}
    if None in kinds or len(kinds) > 1:
        odd = next(f for f in found if FORMATS.get(f.suffix.lower()) != FORMATS.get(
            found[0].suffix.lower()) or f.suffix.lower() not in FORMATS)
        raise ConfigError(f"dataset.path={path}: {odd.name}: shards must all be CSV or all "
                          "Parquet (.csv, .parquet, .pq)")
    return found


def groups_of(files: Sequence[Path], target: str) -> tuple[list[Group], np.ndarray, list[str]]:
    """Every file's groups, the target column's values in row order, and the columns (the
    same in every file)."""
    import pyarrow.parquet as pq

    groups, labels, columns = [], [], None
    for f in files:
        kind = FORMATS.get(f.suffix.lower())
        if kind is None:
            raise ConfigError(f"dataset.path={f}: unknown suffix {f.suffix!r}; dataset=table "
                              "reads .csv, .parquet and .pq files (dataset=arrays reads .npz)")
        try:
            if kind == "CSV":
                names = list(pd.read_csv(f, nrows=0).columns)
                found = [Group(str(f), kind, None, 0)]
            else:
                meta = pq.ParquetFile(f)
                names = list(meta.schema_arrow.names)
                found = [Group(str(f), kind, i, meta.metadata.row_group(i).num_rows)
                         for i in range(meta.num_row_groups)]
        except (OSError, ValueError) as e:
            raise ConfigError(f"dataset.path: {f}: cannot read as {kind} "
                              f"({' '.join(str(e).split()) or type(e).__name__})") from None
        names = [str(n) for n in names]
        if columns is None:
            columns = names
        elif names != columns:
            raise ConfigError(f"dataset.path: {f}: its columns differ from {files[0].name}'s "
                              f"({', '.join(names)} against {', '.join(columns)})")
        if target not in names:
            raise ConfigError(f"dataset.target={target}: no such column in {f}; its columns: "
                              f"{', '.join(names)}")
        for g in found:
            values = g.read([target])[target]
            if values.isna().any():
                raise ConfigError(f"dataset.target={target}: missing label at row "
                                  f"{int(np.flatnonzero(values.isna())[0])} of {f}")
            labels.append(values.to_numpy())
            groups.append(Group(g.file, g.kind, g.index, len(values)))
    return groups, np.concatenate(labels), columns or []


def moments(table: StreamedTable) -> tuple[np.ndarray, np.ndarray]:
    """The training rows' per-feature mean and std (0 replaced by 1), a group at a time, and
    every feature value checked on the way."""
    starts = np.cumsum([0] + [g.rows for g in table.groups])
    n, mean, m2 = 0, np.zeros(len(table.features)), np.zeros(len(table.features))
    for g, group in enumerate(table.groups):
        x = _features(group, table.features)
        lo, hi = np.searchsorted(table.train_rows, [starts[g], starts[g + 1]])
        part = x[table.train_rows[lo:hi] - starts[g]]
        if not len(part):
            continue
        k, part_mean = len(part), part.mean(axis=0)
        delta = part_mean - mean  # Chan et al.'s pairwise update
        mean = mean + delta * k / (n + k)
        m2 = m2 + ((part - part_mean) ** 2).sum(axis=0) + delta ** 2 * n * k / (n + k)
        n += k
    std = np.sqrt(m2 / max(n, 1)).astype(np.float32)
    std[std <= 1e-7] = 1  # float32, as Scaling and the kept model's first layer use them
    return mean.astype(np.float32), std
