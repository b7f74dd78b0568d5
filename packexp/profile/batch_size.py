"""Figure 4b: Ts(Seq), Ts(Pack) and IMPV of two identical members as the batch size grows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError, positive_int
from packexp.profile.base import Profile, ProfileContext
from packexp.profile.checks import int_list
from packexp.profile.figures import title
from packexp.profile.sweep import SWEEP_COLUMNS, plot_sweep, sweep_identical


class BatchSizeProfile(Profile):
    """Packs ``num_models`` identical members at each batch size.

    Args:
        batch_sizes: Batch sizes, visited in increasing order until the memory limit.
        num_models: Members in the pack.
        **kwargs: Timing and member settings of ``Profile``.
    """

    name = "batch_size"
    columns = SWEEP_COLUMNS
    metric_columns = ("ts_seq_ms", "ts_pack_ms", "impv")

    def __init__(self, batch_sizes: Sequence[int] = (32, 48, 64, 80, 100), num_models: int = 2,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch_sizes = int_list("batch_sizes", batch_sizes)
        self.num_models = positive_int("num_models", num_models)

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        too_big = [b for b in self.batch_sizes if b > ctx.data.train_size]
        if too_big:
            raise ConfigError(f"profile.batch_sizes={list(self.batch_sizes)}: {too_big} exceed the "
                             f"{ctx.data.train_size} training examples")
        return sweep_identical(self, ctx, [(self.num_models, b) for b in self.batch_sizes])

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        return plot_sweep(rows, path, "batch_size", "batch size",
                          title(ctx, f"Figure 4b: packing {self.num_models} identical models "
                                     "as the batch size grows"))
