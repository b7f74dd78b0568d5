"""Table 2: an epoch of N members one after another against packed, and the switching overhead."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packexp.errors import positive_int
from packexp.packing import Pack
from packexp.profile.base import Profile, ProfileContext
from packexp.profile.checks import int_list
from packexp.profile.figures import figure, save, title
from packexp.profile.timing import balanced
from packexp.space import Trial
from packexp.space.options import PackSettings


class SwitchOverheadProfile(Profile):
    """Te(Seq), the sum of Te(single) and SwOH = Te(Seq) - sum Te(single), against Te(Pack).

    Sequentially, each member is loaded (model and optimizer built, step function compiled),
    trains its epochs alone and is unloaded (checkpointed, as ``Pack.free`` does). Te(Seq)
    is the wall time of all of it; Te(single) is a member's training steps alone, so SwOH
    is what switching from one model to the next costs. Packed, all members load at once,
    train together and are unloaded; Te(Pack) is its wall time.

    Args:
        num_models: Numbers of members (the paper's Table 2 trains two).
        batch_size: Every member's batch size.
        epochs: Epochs each member trains.
        **kwargs: Timing and member settings of ``Profile``; each ``xla`` setting is a row.
    """

    name = "switch_overhead"
    columns = ("num_models", "batch_size", "epochs", "steps_per_epoch", "xla", "te_seq_s",
               "te_single_s", "te_single_sum_s", "swoh_s", "swoh_per_switch_s", "te_pack_s",
               "pack_build_s", "pack_train_s", "ts_single_ms", "swoh_per_switch_steps")
    metric_columns = ("te_seq_s", "te_single_sum_s", "swoh_s", "te_pack_s")

    def __init__(self, num_models: Sequence[int] = (2,), batch_size: int = 32, epochs: int = 1,
                 **kwargs: Any) -> None:
        kwargs.setdefault("repeats", 3)
        super().__init__(**kwargs)
        self.num_models = int_list("num_models", num_models)
        self.batch_size = positive_int("batch_size", batch_size)
        self.epochs = positive_int("epochs", epochs)

    def point_label(self, row: Mapping[str, Any]) -> str:
        return f"n{row['num_models']}_xla-{row['xla']}"

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        steps = self.epochs * (ctx.data.train_size // self.batch_size)
        if steps < 1:
            from packexp.errors import ConfigError

            raise ConfigError(f"profile.batch_size={self.batch_size}: more than the "
                              f"{ctx.data.train_size} training examples")
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for xla in self.xla:
                options = {**ctx.pack_options, "jit_compile": xla, "chunk_steps": steps}
                warm = [ctx.trial(10_000, self.hparams(self.batch_size), prefix="warmup")]
                self._sequential(ctx, warm, 2, options, Path(tmp))  # TensorFlow's one-offs
                for n in self.num_models:
                    rows.append(self._point(ctx, n, steps, options, Path(tmp), xla))
        return rows

    def _point(self, ctx: ProfileContext, n: int, steps: int, options: dict[str, Any],
               tmp: Path, xla: bool) -> dict[str, Any]:
        trials = [ctx.trial(i, self.hparams(self.batch_size)) for i in range(n)]
        seq, singles, packed, build, train = [], [], [], [], []
        for order in balanced(("seq", "pack"), self.repeats):  # ABBA: same load for both
            for arm in order:
                if arm == "seq":
                    wall, trained = self._sequential(ctx, trials, steps, options, tmp)
                    seq.append(wall)
                    singles.append(trained)
                else:
                    wall, stats = self._packed(ctx, trials, steps, options, tmp)
                    packed.append(wall)
                    build.append(stats.trace_s)
                    train.append(stats.train_s)
        te_seq = statistics.median(seq)
        per_member = np.median(np.array(singles), axis=0)
        te_sum = float(per_member.sum())
        swoh = te_seq - te_sum
        ts_single_ms = 1000 * te_sum / (n * steps)
        return {"num_models": n, "batch_size": self.batch_size, "epochs": self.epochs,
                "steps_per_epoch": steps // self.epochs, "xla": "on" if xla else "off",
                "te_seq_s": te_seq, "te_single_s": te_sum / n, "te_single_sum_s": te_sum,
                "swoh_s": swoh, "swoh_per_switch_s": swoh / n,
                "te_pack_s": statistics.median(packed), "pack_build_s": statistics.median(build),
                "pack_train_s": statistics.median(train), "ts_single_ms": ts_single_ms,
                "swoh_per_switch_steps": 1000 * swoh / n / ts_single_ms}

    @staticmethod
    def _sequential(ctx: ProfileContext, trials: Sequence[Trial], steps: int,
                    options: Mapping[str, Any], tmp: Path) -> tuple[float, list[float]]:
        """Wall time of loading, training and unloading each member in turn; each one's steps."""
        trained = []
        start = time.perf_counter()
        for trial in trials:
            member = ctx.member(trial)
            pack = Pack([member], ctx.data, PackSettings.from_config(options))
            trained.append(pack.train({trial.trial_id: steps}).train_s)
            pack.free(trial.trial_id, tmp)
        return time.perf_counter() - start, trained

    @staticmethod
    def _packed(ctx: ProfileContext, trials: Sequence[Trial], steps: int,
                options: Mapping[str, Any], tmp: Path) -> tuple[float, Any]:
        start = time.perf_counter()
        pack = Pack([ctx.member(t) for t in trials], ctx.data, PackSettings.from_config(options))
        stats = pack.train({t.trial_id: steps for t in trials})
        for trial in trials:
            pack.free(trial.trial_id, tmp)
        return time.perf_counter() - start, stats

    def objective(self, rows: Sequence[Mapping[str, Any]]) -> float:
        """The largest switching overhead measured, in seconds."""
        return max(r["swoh_s"] for r in rows)

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        fig, (ax,) = figure(1, width=7.0, height=4.6)
        bars = (("te_seq_s", "Te(Seq)"), ("te_single_sum_s", "sum of Te(single)"),
                ("swoh_s", "SwOH"), ("te_pack_s", "Te(Pack)"))
        x = np.arange(len(rows))
        width = 0.8 / len(bars)
        for i, (column, label) in enumerate(bars):
            values = [r[column] for r in rows]
            drawn = ax.bar(x + (i - (len(bars) - 1) / 2) * width, values, width, label=label)
            ax.bar_label(drawn, fmt="%.2f", fontsize=7)
        ax.set_xticks(x, [f"{r['num_models']} models, XLA {r['xla']}" for r in rows])
        ax.set_ylabel(f"seconds for {self.epochs} epoch{'s' if self.epochs > 1 else ''}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax.set_title(title(ctx, f"Table 2: switching overhead, batch size {self.batch_size}"),
                     fontsize=10)
        return save(fig, path)
