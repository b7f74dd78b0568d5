"""The profile extension point and what profiles share: members, timing, memory, outputs."""

from __future__ import annotations

import abc
import csv
import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import tensorflow as tf
from omegaconf import DictConfig, OmegaConf

from packexp.data import Dataset
from packexp.errors import ConfigError
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.data import Preprocessing
from packexp.search_space import Trial, derive_seed

log = logging.getLogger(__name__)

MB = 2**20
OK = "ok"
OUT_OF_MEMORY = "out_of_memory"
CSV_NAME = "profile.csv"
FIGURE_NAME = "profile.png"


@dataclass
class ProfileContext:
    """What a profile measures on: the configured data, model, device and pack settings.

    Attributes:
        cfg: The composed config.
        dataset: The configured dataset, as arrays.
        build_model: The configured model builder ``(input_shape, classes, hparams)``.
        names: Config names of ``model`` and ``dataset``.
        pack_options: ``Pack`` keyword arguments from ``cfg.pack``, checked.
        run_dir: Where the profile writes its outputs.
    """

    cfg: DictConfig
    dataset: Dataset
    build_model: Callable[..., Any]
    names: dict[str, str]
    pack_options: dict[str, Any]
    run_dir: Path
    _data: DeviceData | None = field(default=None, repr=False)
    _capacity: Any = field(default=None, repr=False)

    @classmethod
    def from_config(cls, cfg: DictConfig, run_dir: Path) -> ProfileContext:
        from packexp.config import check_pairing, component_name, instantiate, pack_settings

        dataset = instantiate(cfg.dataset, "dataset")
        build_model = instantiate(cfg.model, "model")
        check_pairing(cfg, build_model, dataset)
        names = {g: component_name(cfg, g) for g in ("model", "dataset")}
        return cls(cfg, dataset, build_model, names, pack_settings(cfg.pack), Path(run_dir))

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    @property
    def data(self) -> DeviceData:
        """The dataset on the device, placed once for the whole profile."""
        if self._data is None:
            self._data = DeviceData(self.dataset)
        return self._data

    def node(self, group: str) -> dict[str, Any]:
        """The resolved config of ``group``, for worker processes to instantiate."""
        return OmegaConf.to_container(self.cfg[group], resolve=True)

    def trial(self, index: int, hparams: Mapping[str, Any], prefix: str = "m") -> Trial:
        """Trial ``index`` with its own seed (initial weights and data order)."""
        return Trial(f"{prefix}{index}", dict(hparams), (), seed=derive_seed(self.seed, index))

    def member(self, trial: Trial, build_model: Callable[..., Any] | None = None,
               train_size: int | None = None, preprocessing: Preprocessing | None = None,
               member_cls: type[Member] = Member) -> Member:
        """Builds ``trial``'s member over the configured data (or ``train_size`` examples)."""
        return member_cls.create(trial, build_model or self.build_model, self.dataset.input_shape,
                                 self.dataset.num_classes, train_size or self.data.train_size,
                                 preprocessing)

    def memory_limit(self) -> tuple[int, str]:
        """Bytes one pack may use on this device, and the setting they come from."""
        from packexp.packing.memory import device_capacity_bytes

        device = self.cfg.device
        try:
            return device_capacity_bytes(device.memory_budget_mb, device.gpu_memory_fraction)
        except ValueError as e:
            raise ConfigError(f"device.{e}") from None

    def predicted_bytes(self, trials: Sequence[Trial], largest: int | None = None) -> float:
        """The memory model's cost of packing ``trials``: the estimate, checked by a probe.

        It is the tuner's own model (``device.probe`` decides whether a probe checks it),
        so a profile stops where a search would stop packing.

        Args:
            trials: The pack's members.
            largest: The most members any pack of this profile holds (for ``probe=auto``,
                which probes where such a pack could come near the limit); fixed at the
                first call.

        Returns:
            Bytes.
        """
        if self._capacity is None:
            from packexp.device import device_capacity

            self._capacity, _, _ = device_capacity(self.cfg.device, largest or len(trials),
                                                self.member, self.data, self.pack_options)
        return float(sum(self._capacity.cost(t) for t in trials))


def hparams(batch_size: int, optimizer: str, learning_rate: float,
            activation: str) -> dict[str, Any]:
    return {"batch_size": int(batch_size), "optimizer": optimizer,
            "learning_rate": float(learning_rate), "activation": activation}


class Profile(abc.ABC):
    """One of the paper's micro-benchmarks: measures points, then draws them.

    Args:
        steps: Steps per timed chunk (one timing is the median step time of a chunk).
        warmup_steps: Steps run after compiling and before any timing.
        repeats: Timed chunks per figure; figures are medians over repeats.
        xla: XLA settings to try; each step time is the faster of them.
        optimizer: Every member's optimizer, unless the profile varies it.
        learning_rate: Every member's learning rate.
        activation: Every member's activation.
    """

    name: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    # Columns logged to MLflow, one metric per measured point.
    metric_columns: ClassVar[tuple[str, ...]] = ()
    # Columns of the table printed at the end; all of ``columns`` when None.
    shown_columns: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, steps: int = 100, warmup_steps: int = 20, repeats: int = 5,
                 xla: Sequence[bool] = (False, True), optimizer: str = "adam",
                 learning_rate: float = 1e-3, activation: str = "relu") -> None:
        self.steps = positive_int("steps", steps)
        self.warmup_steps = positive_int("warmup_steps", warmup_steps, minimum=0)
        self.repeats = positive_int("repeats", repeats)
        xla = list(xla) if isinstance(xla, Sequence) and not isinstance(xla, str) else [xla]
        if not xla or any(not isinstance(x, bool) for x in xla):
            raise ValueError(f"xla={xla!r}: must be a non-empty list of true/false")
        self.xla = tuple(dict.fromkeys(xla))
        from packexp.packing.optimizers import NAMES

        if optimizer not in NAMES:
            raise ValueError(f"optimizer={optimizer!r}: must be one of {list(NAMES)}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, int | float) \
                or not learning_rate > 0:
            raise ValueError(f"learning_rate={learning_rate!r}: must be a positive number")
        self.optimizer = optimizer
        self.learning_rate = float(learning_rate)
        self.activation = activation

    def hparams(self, batch_size: int, optimizer: str | None = None) -> dict[str, Any]:
        return hparams(batch_size, optimizer or self.optimizer, self.learning_rate,
                       self.activation)

    @abc.abstractmethod
    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        """Measures every point.

        Args:
            ctx: The configured data, model and device.

        Returns:
            One row per measured point, keyed by ``columns``.
        """

    @abc.abstractmethod
    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        """Draws the profile's figure into ``path`` (PNG) and returns it."""

    def objective(self, rows: Sequence[Mapping[str, Any]]) -> float:
        """The number ``python -m packexp`` returns: the best IMPV measured."""
        values = [r["impv"] for r in rows if finite(r.get("impv"))]
        return max(values) if values else math.nan

    def point_label(self, row: Mapping[str, Any]) -> str:
        return f"n{row.get('num_models')}_b{row.get('batch_size')}"

    def metrics(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """One MLflow metric per measured point and column of ``metric_columns``."""
        out: dict[str, float] = {}
        for row in rows:
            label = self.point_label(row)
            for column in self.metric_columns:
                if finite(row.get(column)):
                    out[f"{column}.{label}"] = float(row[column])
        return out


def positive_int(key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key}={value!r}: must be an integer >= {minimum}")
    return value


def int_list(key: str, values: Any, minimum: int = 1) -> tuple[int, ...]:
    """A non-empty list of integers >= ``minimum``, sorted and without repeats."""
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, str) or not isinstance(values, Sequence) or not values or any(
            isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values):
        raise ValueError(f"{key}={values!r}: must be a non-empty list of integers >= {minimum}")
    return tuple(sorted(set(values)))


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def impv(ts_seq: float, ts_pack: float) -> float:
    """The paper's IMPV = (Ts(Seq) - Ts(Pack)) / Ts(Seq)."""
    return (ts_seq - ts_pack) / ts_seq


def xla_label(settings: set[bool]) -> str:
    if len(settings) == 1:
        return "on" if next(iter(settings)) else "off"
    return "mixed"


class PackTimer:
    """Builds, warms up and times packs, each compiled once per key and XLA setting.

    Args:
        options: ``Pack`` keyword arguments (the configured ``cfg.pack``).
        steps: Steps per timed chunk.
        warmup_steps: Steps run once after compiling, untimed.
    """

    def __init__(self, options: Mapping[str, Any], steps: int, warmup_steps: int) -> None:
        self.options = dict(options)
        self.steps = steps
        self.warmup_steps = warmup_steps
        self._packs: dict[tuple[Hashable, bool], Pack | None] = {}

    def prepare(self, key: Hashable, members: Sequence[Member], data: DeviceData, xla: bool,
                **overrides: Any) -> Pack | None:
        """The warmed-up pack of ``members``; None when XLA cannot compile it."""
        if (key, xla) not in self._packs:
            options = {**self.options, **overrides, "jit_compile": xla,
                       "chunk_steps": self.steps}
            pack = Pack(list(members), data, **options)
            try:
                if self.warmup_steps:
                    pack.train({m.trial_id: self.warmup_steps for m in members})
                else:  # still compile, outside any timing
                    pack.train({m.trial_id: 1 for m in members})
            except tf.errors.ResourceExhaustedError:
                raise
            except tf.errors.OpError as e:
                if not xla:
                    raise
                log.info("XLA cannot compile pack %s (%s); timing it without XLA only", key,
                         str(e).splitlines()[0][:120])
                pack = None
            self._packs[(key, xla)] = pack
        return self._packs[(key, xla)]

    def time_ms(self, pack: Pack) -> float:
        """Median step time of one chunk of ``steps`` steps of every member."""
        stats = pack.train({m.trial_id: self.steps for m in pack.members})
        return float(stats.step_time_ms)

    def is_fused(self, key: Hashable) -> bool:
        return any(bool(getattr(p, "fused", False))
                   for (k, _), p in self._packs.items() if k == key and p is not None)

    def drop(self, key: Hashable | None = None) -> None:
        """Forgets the packs of ``key`` (all packs when None), freeing their step functions."""
        for k in [k for k in self._packs if key is None or k[0] == key]:
            del self._packs[k]


@dataclass(frozen=True)
class Comparison:
    """Ts(Seq) and Ts(Pack) of one set of members, each the faster of the XLA settings."""

    ts_seq_ms: float
    ts_pack_ms: float
    seq_xla: str
    pack_xla: str
    fused: bool = False

    @property
    def impv(self) -> float:
        return impv(self.ts_seq_ms, self.ts_pack_ms)

    def row(self) -> dict[str, Any]:
        return {"ts_seq_ms": self.ts_seq_ms, "ts_pack_ms": self.ts_pack_ms, "impv": self.impv,
                "seq_xla": self.seq_xla, "pack_xla": self.pack_xla, "fused": self.fused}


def compare(timer: PackTimer, members: Sequence[Member], data: DeviceData, *,
            repeats: int, xla: Sequence[bool], pack_key: Hashable,
            single_keys: Sequence[Hashable] | None = None, **overrides: Any) -> Comparison:
    """Times each member alone and all of them packed, interleaved in every repeat.

    Ts(Seq) is never handicapped: each member trains alone in its own pack, with the faster
    of the XLA settings for that member. Members with equal ``single_keys`` (identical
    architecture and hyper-parameters) share one single-member measurement.

    Args:
        timer: Builds and times the packs.
        members: The pack's members.
        data: The device data they train on.
        repeats: Interleaved repeats; each figure is the median over them.
        xla: XLA settings to try.
        pack_key: Cache key of the pack in ``timer``.
        single_keys: Cache key of each member's single-member pack; the trial ids if None.
        **overrides: ``Pack`` options for these packs (and their singles).

    Returns:
        The comparison.
    """
    keys = list(single_keys) if single_keys is not None else [m.trial_id for m in members]
    firsts: dict[Hashable, Member] = {}
    for key, member in zip(keys, members, strict=True):
        firsts.setdefault(key, member)
    singles: dict[tuple[Hashable, bool], list[float]] = defaultdict(list)
    packed: dict[bool, list[float]] = defaultdict(list)
    for _ in range(repeats):
        for x in xla:
            for key, member in firsts.items():
                pack = timer.prepare(("single", key), [member], data, x, **overrides)
                if pack is not None:
                    singles[(key, x)].append(timer.time_ms(pack))
            pack = timer.prepare(pack_key, members, data, x, **overrides)
            if pack is not None:
                packed[x].append(timer.time_ms(pack))
    if not packed or any(not any(singles[(k, x)] for x in xla) for k in firsts):
        raise ConfigError(f"profile.xla={list(xla)}: XLA cannot compile pack {pack_key} (see "
                          "the log); add false")
    best_single: dict[Hashable, tuple[float, bool]] = {}
    for key in firsts:
        options = [(statistics.median(singles[(key, x)]), x) for x in xla if singles[(key, x)]]
        best_single[key] = min(options)
    ts_seq = sum(best_single[key][0] for key in keys)
    ts_pack, pack_x = min((statistics.median(v), x) for x, v in packed.items())
    return Comparison(ts_seq, ts_pack, xla_label({best_single[k][1] for k in firsts}),
                      xla_label({pack_x}), timer.is_fused(pack_key))


def write_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], path: Path) -> Path:
    """Writes ``rows`` with ``columns`` (in that order; missing values left empty)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: cell(row.get(k)) for k in columns})
    return path


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``profile.csv``, with numbers parsed back into numbers."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _parse(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text if text != "" else None


def figure(ncols: int = 1, width: float = 6.0, height: float = 4.2):
    """A matplotlib figure with ``ncols`` axes, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def title(ctx: ProfileContext, what: str) -> str:
    return f"{what}\n{ctx.names['model']} on {ctx.names['dataset']}, {device_name()}"


def device_name() -> str:
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[0])
        return str(details.get("device_name", "GPU"))
    import os

    return f"CPU ({os.cpu_count()} cores)"


def mark_out_of_memory(ax: Any, rows: Sequence[Mapping[str, Any]], x: str, y: float,
                       status: str = "status") -> None:
    """Draws a red cross labelled OOM at each point that hit the memory limit."""
    for row in rows:
        if row.get(status) == OUT_OF_MEMORY:
            ax.plot([row[x]], [y], marker="x", color="tab:red", markersize=12, mew=3,
                    linestyle="none")
            ax.annotate("OOM", (row[x], y), textcoords="offset points", xytext=(6, 6),
                        color="tab:red", fontweight="bold")


SWEEP_COLUMNS = ("num_models", "batch_size", "ts_seq_ms", "ts_pack_ms", "impv", "seq_xla",
                 "pack_xla", "fused", "predicted_memory_mb", "memory_limit_mb", "status", "note")


def sweep_identical(profile: Profile, ctx: ProfileContext,
                    points: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """Ts(Seq), Ts(Pack) and IMPV of N identical members at each (N, batch size) point.

    Points are visited in order. Before a point trains, the memory model predicts its
    pack's cost; at the first point over the device's limit (or one that runs out of memory
    while training) the sweep records it as ``out_of_memory`` and stops.

    Returns:
        One row per point visited, keyed by ``SWEEP_COLUMNS``.
    """
    limit, source = ctx.memory_limit()
    timer = PackTimer(ctx.pack_options, profile.steps, profile.warmup_steps)
    rows: list[dict[str, Any]] = []
    members: list[Member] = []
    for n, batch in points:
        trials = [ctx.trial(i, profile.hparams(batch)) for i in range(n)]
        predicted = ctx.predicted_bytes(trials, largest=max(n for n, _ in points))
        row: dict[str, Any] = {"num_models": n, "batch_size": batch,
                               "predicted_memory_mb": predicted / MB,
                               "memory_limit_mb": limit / MB, "note": ""}
        rows.append(row)
        if predicted > limit:
            row.update(status=OUT_OF_MEMORY,
                       note=f"predicted {predicted / MB:.0f} MB > {source}; stopped here")
            log.warning("%d members at batch %d: %s", n, batch, row["note"])
            break
        if members and members[0].batch_size != batch:
            members.clear()
            timer.drop()
        while len(members) < n:
            members.append(ctx.member(trials[len(members)]))
        try:
            result = compare(timer, members[:n], ctx.data, repeats=profile.repeats,
                             xla=profile.xla, pack_key=("pack", n),
                             single_keys=["identical"] * n)
        except tf.errors.ResourceExhaustedError as e:
            row.update(status=OUT_OF_MEMORY, note=f"ran out of memory while training: "
                                                  f"{str(e).splitlines()[0][:120]}; stopped here")
            log.warning("%d members at batch %d: %s", n, batch, row["note"])
            break
        timer.drop(("pack", n))
        row.update(result.row(), status=OK)
        log.info("N=%d batch %d: Ts(Seq) %.3f ms (XLA %s), Ts(Pack) %.3f ms (XLA %s), "
                 "IMPV %.1f%%", n, batch, result.ts_seq_ms, result.seq_xla, result.ts_pack_ms,
                 result.pack_xla, 100 * result.impv)
    return rows


def plot_sweep(rows: Sequence[Mapping[str, Any]], path: Path, x: str, xlabel: str,
               heading: str) -> Path:
    """IMPV against ``x`` (left) and Ts(Seq), Ts(Pack) against ``x`` (right)."""
    fig, (left, right) = figure(2)
    done = [r for r in rows if r.get("status") == OK]
    xs = [r[x] for r in done]
    left.plot(xs, [100 * r["impv"] for r in done], marker="o", color="tab:blue",
              label="IMPV = (Ts(Seq) - Ts(Pack)) / Ts(Seq)")
    left.axhline(0, color="grey", linewidth=0.8)
    values = [100 * r["impv"] for r in done] or [0.0]
    low, high = min(-10.0, min(values) - 10), max(100.0, max(values) + 10)
    left.set_ylim(low, high)
    mark_out_of_memory(left, rows, x, low + 0.1 * (high - low))
    left.set_xlabel(xlabel)
    left.set_ylabel("improvement (%)")
    left.set_xticks([r[x] for r in rows])
    left.legend(loc="upper left", fontsize=8)
    left.grid(alpha=0.3)
    right.plot(xs, [r["ts_seq_ms"] for r in done], marker="s", label="Ts(Seq)")
    right.plot(xs, [r["ts_pack_ms"] for r in done], marker="o", label="Ts(Pack)")
    right.set_xlabel(xlabel)
    right.set_ylabel("step time (ms)")
    right.set_xticks([r[x] for r in rows])
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(heading, fontsize=10)
    return save(fig, path)
