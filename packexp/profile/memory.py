"""Figure 6: peak memory of one and two members across batch sizes, each in a fresh process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.packing.memory import estimate_bytes
from packexp.profile import _worker
from packexp.profile.base import MB, OK, OUT_OF_MEMORY, Profile, ProfileContext
from packexp.profile.checks import int_list
from packexp.profile.figures import figure, mark_out_of_memory, save, title


class MemoryProfile(Profile):
    """Peak memory of packs of ``num_models`` identical members at each batch size.

    Each point trains in a fresh process, so no allocation of an earlier point is reused
    and hides its cost. ``peak_memory_mb`` is how far the peak rose once TensorFlow was up
    and the data was on the device: the members' weights, optimizer state, step function
    and activations (the process's peak RSS on a CPU, TensorFlow's allocator peak on a GPU:
    allocated, not active, memory, as in the paper).

    Args:
        num_models: Pack sizes.
        batch_sizes: Batch sizes, in increasing order; a pack size stops at the first batch
            size over the device's memory limit.
        **kwargs: Timing and member settings of ``Profile`` (the first ``xla`` is used).
    """

    name = "memory"
    columns = ("num_models", "batch_size", "peak_memory_mb", "process_peak_mb",
               "estimated_memory_mb", "memory_limit_mb", "status", "note")
    metric_columns = ("peak_memory_mb", "process_peak_mb")

    def __init__(self, num_models: Sequence[int] = (1, 2),
                 batch_sizes: Sequence[int] = (32, 48, 64, 80, 100), **kwargs: Any) -> None:
        kwargs.setdefault("steps", 20)
        kwargs.setdefault("repeats", 1)
        super().__init__(**kwargs)
        self.num_models = int_list("num_models", num_models)
        self.batch_sizes = int_list("batch_sizes", batch_sizes)

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        spec = _worker.spec_maker(self, ctx)
        limit, source = ctx.memory_limit()
        model = ctx.build_model(ctx.dataset.input_shape, ctx.dataset.num_classes,
                                self.hparams(self.batch_sizes[0]))
        rows: list[dict[str, Any]] = []
        stopped: set[int] = set()
        for batch in self.batch_sizes:
            # One process per pack size at once: peaks are per process, so they do not mix.
            sizes = [n for n in self.num_models if n not in stopped]
            jobs = [spec([self.hparams(batch)] * n) for n in sizes]
            for n, result in zip(sizes, _worker.run_workers(jobs), strict=True):
                row: dict[str, Any] = {
                    "num_models": n, "batch_size": batch,
                    "estimated_memory_mb": n * estimate_bytes(model, self.optimizer, batch) / MB,
                    "memory_limit_mb": limit / MB, "status": result.status, "note": result.note}
                if result.status == OK:
                    row.update(peak_memory_mb=result.growth_bytes / MB,
                               process_peak_mb=result.peak_bytes / MB)
                    if result.growth_bytes > limit:
                        row.update(status=OUT_OF_MEMORY,
                                   note=f"peak {result.growth_bytes / MB:.0f} MB > {source}")
                rows.append(row)
                if row["status"] == OUT_OF_MEMORY:
                    stopped.add(n)
        rows.sort(key=lambda r: (r["num_models"], r["batch_size"]))
        return rows

    def objective(self, rows: Sequence[Mapping[str, Any]]) -> float:
        """The largest peak measured, in MB."""
        values = [r["peak_memory_mb"] for r in rows if r.get("peak_memory_mb") is not None]
        return max(values) if values else float("nan")

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        fig, (ax,) = figure(1, width=7.0, height=4.6)
        for i, n in enumerate(self.num_models):
            mine = [r for r in rows if r["num_models"] == n]
            done = [r for r in mine if r.get("peak_memory_mb") is not None]
            colour = f"C{i}"
            label = f"{n} model{'s' if n > 1 else ''}"
            ax.plot([r["batch_size"] for r in done], [r["peak_memory_mb"] for r in done],
                    marker="o", color=colour, label=f"{label}: measured peak")
            ax.plot([r["batch_size"] for r in mine], [r["estimated_memory_mb"] for r in mine],
                    linestyle=":", color=colour, label=f"{label}: tensor estimate")
        peaks = [r["peak_memory_mb"] for r in rows if r.get("peak_memory_mb") is not None]
        top = max(peaks + [r["estimated_memory_mb"] for r in rows] + [1.0])
        limit = rows[0]["memory_limit_mb"] if rows else None
        if limit is not None and limit < 3 * top:
            ax.axhline(limit, color="tab:red", linestyle="--", linewidth=1,
                       label=f"memory limit {limit:.0f} MB")
        mark_out_of_memory(ax, rows, "batch_size", top * 0.05)
        ax.set_xticks(list(self.batch_sizes))
        ax.set_xlabel("batch size")
        ax.set_ylabel("peak memory (MB)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax.set_title(title(ctx, "Figure 6: peak memory of packed models"), fontsize=10)
        return save(fig, path)
