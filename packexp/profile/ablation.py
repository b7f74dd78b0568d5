"""Table 1 and Figure 5: two members for every combination of the paper's five factors.

- model: the configured model twice, or it and ``other_model``.
- data: the same batches (``data_sharing=slice``: one gather, one preprocessing pass shared
  by both, the paper's shared input), or different data (each member gathers from its own
  dataset: the configured one and a second draw of it with seed + 1, concatenated into one
  device tensor of which each member reads its own half).
- preprocess: decode PNG-encoded examples inside the step, or train on pre-decoded arrays.
- optimizer: both the first of ``optimizers``, or one each.
- batch size: both the first of ``batch_sizes``, or one each.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from packexp.data import Dataset
from packexp.packing import DeviceData, Member
from packexp.packing.data import Preprocessing
from packexp.profile.base import OK, OUT_OF_MEMORY, Profile, ProfileContext
from packexp.profile.checks import check_batch_sizes, int_list
from packexp.profile.figures import figure, save, title
from packexp.profile.peak import peak_note, shares
from packexp.profile.readings import COLUMN, FACTORS, HELD, LABELS
from packexp.profile.timing import PackTimer, compare

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodePreprocessing(Preprocessing):
    """Decodes PNG-encoded examples inside the step, then preprocesses them as usual.

    Images are PNGs of themselves. Float features are one-row PNGs whose four channels hold
    each float's bytes, so decoding gives back the very same values.

    Attributes:
        shape: Shape of one decoded example.
    """

    shape: tuple[int, ...] = ()

    def decode(self, x: tf.Tensor) -> tf.Tensor:
        """A tensor of PNG strings of any shape to the examples they hold."""
        png = _png_shape(self.shape)
        flat = tf.reshape(x, [-1])
        pixels = tf.map_fn(
            lambda s: tf.ensure_shape(tf.io.decode_png(s, channels=png[-1]), png), flat,
            fn_output_signature=tf.TensorSpec(png, tf.uint8))
        if len(self.shape) == 1:
            pixels = tf.bitcast(tf.reshape(pixels, [-1, self.shape[0], 4]), tf.float32)
        return tf.reshape(pixels, tf.concat([tf.shape(x), self.shape], axis=0))

    def __call__(self, x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        return super().__call__(self.decode(x), seed)

    def evaluation(self, x: tf.Tensor) -> tf.Tensor:
        return super().evaluation(self.decode(x))


def _png_shape(shape: tuple[int, ...]) -> list[int]:
    if len(shape) == 1:
        return [1, shape[0], 4]
    if len(shape) == 3 and 1 <= shape[2] <= 4:
        return list(shape)
    raise ValueError(f"cannot PNG-encode examples of shape {list(shape)}: need [features] or "
                     "[height, width, 1..4 channels]")


def encode_png(dataset: Dataset) -> Dataset:
    """The dataset with every example PNG-encoded (a string per example), losslessly.

    Returns:
        A dataset whose ``x_train`` and ``x_val`` are 1-D object arrays of PNG bytes.
    """
    shape = tuple(dataset.input_shape)
    png = _png_shape(shape)

    def encode(x: np.ndarray) -> np.ndarray:
        if len(shape) == 1:
            x = np.ascontiguousarray(x, dtype=np.float32).view(np.uint8)
        pixels = x.reshape(len(x), *png)
        return np.array([tf.io.encode_png(p).numpy() for p in pixels], dtype=object)

    return Dataset(f"{dataset.name}-png", encode(dataset.x_train), dataset.y_train,
                   encode(dataset.x_val), dataset.y_val, dataset.num_classes)


def concatenate(first: Dataset, second: Dataset) -> Dataset:
    """Both training sets in one (``first`` then ``second``), validating on ``first``'s."""
    return Dataset(f"{first.name}+{second.name}",
                   np.concatenate([first.x_train, second.x_train]),
                   np.concatenate([first.y_train, second.y_train]),
                   first.x_val, first.y_val, first.num_classes)


@dataclass(eq=False)
class OffsetMember(Member):
    """A member whose training examples start at row ``offset`` of the device data.

    With two datasets concatenated into one device tensor, each member reads its own.
    """

    offset: int = 0

    def next_batches(self, steps: int) -> np.ndarray:
        return super().next_batches(steps) + np.int32(self.offset)


class AblationProfile(Profile):
    """Two members for every combination of the varied factors (the paper's Table 1).

    Args:
        other_model: The second member's model builder when the models differ.
        batch_sizes: The first member's batch size, and the second's when they differ.
        optimizers: The first member's optimizer, and the second's when they differ.
        factors: Factors to vary; the others are held alike (preprocessing: pre-decoded).
        **kwargs: Timing and member settings of ``Profile``.
    """

    name = "ablation"
    columns = ("same_model", "same_data", "preprocess_in_step", "same_optimizer",
               "same_batch_size", "members", "data_sharing", "ts_seq_ms", "ts_pack_ms",
               "impv", "impv_low", "impv_high", "repeats", "pack_faster", "seq_xla",
               "pack_xla", "fused", "seq_peak_share", "pack_peak_share",
               "matmul_peak_gflops", "status", "note")
    metric_columns = ("ts_seq_ms", "ts_pack_ms", "impv")
    shown_columns = ("same_model", "same_data", "preprocess_in_step", "same_optimizer",
                     "same_batch_size", "ts_seq_ms", "ts_pack_ms", "impv", "seq_xla",
                     "pack_xla", "fused", "status")

    def __init__(self, other_model: Callable[..., Any] | None = None,
                 batch_sizes: Sequence[int] = (32, 50),
                 optimizers: Sequence[str] = ("adam", "sgd"),
                 factors: Sequence[str] = FACTORS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if other_model is None:
            from packexp.models import mlp3

            other_model = functools.partial(mlp3.build, width=256, depth=2)
        self.other_model = other_model
        sizes = list(batch_sizes)
        if len(sizes) != 2 or len(int_list("batch_sizes", sizes)) != 2:
            raise ValueError(f"batch_sizes={sizes!r}: must be two different integers >= 1")
        self.batch_sizes = (int(sizes[0]), int(sizes[1]))
        from packexp.space.options import OPTIMIZERS as NAMES

        opts = list(optimizers)
        if len(opts) != 2 or opts[0] == opts[1] or any(o not in NAMES for o in opts):
            raise ValueError(f"optimizers={opts!r}: must be two different names of "
                             f"{list(NAMES)}")
        self.optimizers = (opts[0], opts[1])
        unknown = [f for f in factors if f not in FACTORS]
        if unknown or not factors:
            raise ValueError(f"factors={list(factors)!r}: must be a non-empty list of "
                             f"{list(FACTORS)}")
        self.factors = tuple(f for f in FACTORS if f in factors)

    def combinations(self) -> list[dict[str, bool]]:
        """Every combination of the varied factors, grouped by (preprocess, data)."""
        choices = [(True, False) if f in self.factors else (HELD[f],) for f in FACTORS]
        combos = [dict(zip(FACTORS, values, strict=True)) for values in itertools.product(*choices)]
        return sorted(combos, key=lambda c: (c["preprocess"], c["data"]), reverse=True)

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        check_batch_sizes(self.batch_sizes, ctx.dataset)
        sources = _Sources(ctx)
        timer = PackTimer(ctx.pack_options, self.steps, self.warmup_steps)
        members: dict[tuple, Member] = {}
        rows: list[dict[str, Any]] = []
        block = None
        for combo in self.combinations():
            if (combo["preprocess"], combo["data"]) != block:
                block = (combo["preprocess"], combo["data"])
                members.clear()  # bounds memory: no member is shared across blocks
                timer.drop()
            data = sources.data(decode=combo["preprocess"], shared=combo["data"])
            specs = self._specs(combo)
            pack_members = [self._member(ctx, sources, members, spec, combo) for spec in specs]
            overrides: dict[str, Any] = {"data_sharing": "slice" if combo["data"] else "gather"}
            if combo["preprocess"] and "fusion" in ctx.pack_options:
                overrides["fusion"] = "off"  # a fused step cannot decode
            row: dict[str, Any] = {COLUMN[f]: combo[f] for f in FACTORS}
            row.update(members=" + ".join(self._describe(ctx, s) for s in specs),
                       data_sharing=overrides["data_sharing"], note="")
            key = tuple(combo.values())
            try:
                result = compare(timer, pack_members, data, repeats=self.repeats, xla=self.xla,
                                 pack_key=key, single_keys=[_key(s, combo) for s in specs],
                                 **overrides)
            except tf.errors.ResourceExhaustedError as e:
                row.update(status=OUT_OF_MEMORY, note=str(e).splitlines()[0][:120])
                rows.append(row)
                continue
            timer.drop(key)
            row.update(result.row(), **shares(pack_members, result.ts_seq_ms,
                                              result.ts_pack_ms),
                       pack_faster=result.ts_pack_ms < result.ts_seq_ms, status=OK)
            rows.append(row)
            log.info("%s: Ts(Seq) %.3f ms, Ts(Pack) %.3f ms, IMPV %.1f%%", self.point_label(row),
                     result.ts_seq_ms, result.ts_pack_ms, 100 * result.impv)
        return rows

    def _specs(self, combo: Mapping[str, bool]) -> list[tuple[int, bool, str, int]]:
        """(index, other model?, optimizer, batch size) of both members."""
        first = (0, False, self.optimizers[0], self.batch_sizes[0])
        second = (1, not combo["model"],
                  self.optimizers[0 if combo["optimizer"] else 1],
                  self.batch_sizes[0 if combo["batch_size"] else 1])
        return [first, second]

    def _member(self, ctx: ProfileContext, sources: _Sources, cache: dict[tuple, Member],
                spec: tuple[int, bool, str, int], combo: Mapping[str, bool]) -> Member:
        key = _key(spec, combo)
        if key not in cache:
            index, other, optimizer, batch = spec
            n = ctx.dataset.x_train.shape[0]
            preprocessing = (DecodePreprocessing(shape=tuple(ctx.dataset.input_shape))
                             if combo["preprocess"] else None)
            member = ctx.member(ctx.trial(index, self.hparams(batch, optimizer)),
                                build_model=self.other_model if other else None,
                                train_size=n, preprocessing=preprocessing,
                                member_cls=OffsetMember)
            member.offset = 0 if combo["data"] else index * n
            cache[key] = member
        return cache[key]

    def _describe(self, ctx: ProfileContext, spec: tuple[int, bool, str, int]) -> str:
        _, other, optimizer, batch = spec
        return f"{_builder_name(self.other_model) if other else ctx.names['model']} " \
               f"{optimizer} b{batch}"

    def point_label(self, row: Mapping[str, Any]) -> str:
        return "_".join(f"{f}-{LABELS[f][0 if row[COLUMN[f]] else 1].replace(' ', '-')}"
                        for f in FACTORS)

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        fig, (scatter, bars) = figure(2, width=6.2, height=5.0)
        done = [r for r in rows if r.get("status") == OK]
        faster = [r for r in done if r["pack_faster"]]
        slower = [r for r in done if not r["pack_faster"]]
        scatter.scatter([r["ts_seq_ms"] for r in faster], [r["ts_pack_ms"] for r in faster],
                        marker="^", color="tab:green", s=60, zorder=3,
                        label=f"packing faster ({len(faster)})")
        scatter.scatter([r["ts_seq_ms"] for r in slower], [r["ts_pack_ms"] for r in slower],
                        marker="v", color="tab:red", s=60, zorder=3,
                        label=f"packing slower ({len(slower)})")
        values = [v for r in done for v in (r["ts_seq_ms"], r["ts_pack_ms"])] or [1.0]
        low, high = min(values) / 1.2, max(values) * 1.2
        if high / low > 20:
            scatter.set_xscale("log")
            scatter.set_yscale("log")
        scatter.plot([low, high], [low, high], color="grey", linestyle="--", linewidth=1,
                     label="Ts(Pack) = Ts(Seq)")
        scatter.set_xlim(low, high)
        scatter.set_ylim(low, high)
        scatter.set_xlabel("Ts(Seq) (ms)")
        scatter.set_ylabel("Ts(Pack) (ms)")
        scatter.set_title("each point: one combination of the five factors", fontsize=9)
        scatter.legend(fontsize=8, loc="upper left")
        scatter.grid(alpha=0.3)

        varied = [f for f in self.factors if len({r[COLUMN[f]] for r in done}) == 2]
        x = np.arange(len(varied))
        for offset, alike, colour in ((-0.2, True, "tab:blue"), (0.2, False, "tab:orange")):
            means = [100 * float(np.mean([r["impv"] for r in done if r[COLUMN[f]] == alike]))
                     for f in varied]
            bars.bar(x + offset, means, width=0.4, color=colour,
                     label="left: same (preprocess: decoded in the step)" if alike
                     else "right: different (preprocess: pre-decoded arrays)")
        bars.axhline(0, color="grey", linewidth=0.8)
        bars.set_xticks(x, [f"{f.replace('_', ' ')}\n{LABELS[f][0]} | {LABELS[f][1]}"
                            for f in varied], fontsize=7)
        bars.set_ylim(top=bars.get_ylim()[1] * 1.25)  # room for the legend
        bars.set_ylabel("mean IMPV over the other factors (%)")
        bars.set_title("IMPV by factor", fontsize=9)
        bars.legend(fontsize=8)
        bars.grid(alpha=0.3, axis="y")
        heading = title(ctx, "Figure 5: Ts(Seq) vs Ts(Pack) of two packed models")
        note = peak_note(done)
        fig.suptitle(f"{heading}\n{note}" if note else heading, fontsize=10)
        return save(fig, path)


def _key(spec: tuple[int, bool, str, int], combo: Mapping[str, bool]) -> tuple:
    # Within a (preprocess, data) block a member is its index, model, optimizer and batch.
    return (*spec, combo["preprocess"], combo["data"])


def _builder_name(build: Callable[..., Any]) -> str:
    if isinstance(build, functools.partial):
        args = ", ".join(f"{k}={v}" for k, v in build.keywords.items())
        return f"{build.func.__module__.rsplit('.', 1)[-1]}({args})"
    return getattr(build, "__module__", "model").rsplit(".", 1)[-1]


class _Sources:
    """The four device tensors the combinations need, each placed once when first used."""

    def __init__(self, ctx: ProfileContext) -> None:
        self.ctx = ctx
        self._datasets: dict[tuple[bool, bool], Dataset] = {}
        self._data: dict[tuple[bool, bool], DeviceData] = {}

    def data(self, decode: bool, shared: bool) -> DeviceData:
        key = (decode, shared)
        if key not in self._data:
            self._data.clear()  # one (preprocess, data) block at a time
            self._data[key] = DeviceData(self._dataset(decode, shared))
        return self._data[key]

    def _dataset(self, decode: bool, shared: bool) -> Dataset:
        key = (decode, shared)
        if key not in self._datasets:
            if decode:
                self._datasets[key] = encode_png(self._dataset(False, shared))
            elif shared:
                self._datasets[key] = self.ctx.dataset
            else:
                from packexp.config import instantiate

                second = instantiate(self.ctx.cfg.dataset, "dataset", seed=self.ctx.seed + 1)
                self._datasets[key] = concatenate(self.ctx.dataset, second)
        return self._datasets[key]
