"""Figure 4a: Ts(Seq), Ts(Pack) and IMPV of N identical members as N grows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.errors import positive_int
from packexp.profile.base import Profile, ProfileContext
from packexp.profile.checks import int_list
from packexp.profile.figures import title
from packexp.profile.sweep import SWEEP_COLUMNS, plot_sweep, sweep_identical


class NumModelsProfile(Profile):
    """Packs N identical members (same architecture and hyper-parameters, own seeds).

    Args:
        num_models: The values of N, visited in increasing order until the memory limit.
        batch_size: Every member's batch size.
        **kwargs: Timing and member settings of ``Profile``.
    """

    name = "num_models"
    columns = SWEEP_COLUMNS
    metric_columns = ("ts_seq_ms", "ts_pack_ms", "impv")

    def __init__(self, num_models: Sequence[int] = (1, 2, 4, 8), batch_size: int = 32,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_models = int_list("num_models", num_models)
        self.batch_size = positive_int("batch_size", batch_size)

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        return sweep_identical(self, ctx, [(n, self.batch_size) for n in self.num_models])

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        return plot_sweep(rows, path, "num_models", "number of packed models",
                          title(ctx, f"Figure 4a: packing N identical models, batch size "
                                     f"{self.batch_size}"))
