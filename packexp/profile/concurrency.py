"""Section 4.7: one pack of N members against N training processes running at once."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.profile import _worker
from packexp.profile.base import MB, OK, OUT_OF_MEMORY, Profile, ProfileContext
from packexp.profile.checks import int_list
from packexp.profile.figures import figure, mark_out_of_memory, save, title


class ConcurrencyProfile(Profile):
    """N separate processes, each training one member, against one process training the pack.

    The N processes warm up, then time their steps over the same span, sharing the device
    as concurrent CUDA contexts (or CPU processes) do. Each has its own TensorFlow runtime
    and its own copy of the data, which is the paper's point; so memory is each process's
    whole peak, summed over the processes, against the pack process's peak. A point whose
    memory passes the device's limit, or whose worker runs out of memory, is recorded as
    ``out_of_memory``: a result, not a crash.

    Args:
        num_models: Values of N.
        batch_sizes: Every member's batch size, one point each (the paper: 32 to 100).
        **kwargs: Timing and member settings of ``Profile`` (the first ``xla`` is used).
    """

    name = "concurrency"
    columns = ("num_models", "batch_size", "ts_concurrent_ms", "ts_concurrent_mean_ms",
               "ts_pack_ms", "concurrent_over_pack", "peak_memory_concurrent_mb",
               "peak_memory_pack_mb", "memory_limit_mb", "status_concurrent", "status_pack",
               "note")
    metric_columns = ("ts_concurrent_ms", "ts_pack_ms", "peak_memory_concurrent_mb",
                      "peak_memory_pack_mb")

    def __init__(self, num_models: Sequence[int] = (2,),
                 batch_sizes: Sequence[int] = (32, 64, 100), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_models = int_list("num_models", num_models)
        self.batch_sizes = int_list("batch_sizes", batch_sizes)

    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        spec = _worker.spec_maker(self, ctx, sync=True)
        limit, source = ctx.memory_limit()
        rows = []
        for i, (n, batch) in enumerate(itertools.product(self.num_models, self.batch_sizes)):
            hp = self.hparams(batch)
            # Alternate which arm runs first, point by point, so neither always meets the
            # machine fresher.
            if i % 2 == 0:
                alone = _worker.run_workers([spec([hp], indices=[j]) for j in range(n)])
                [pack] = _worker.run_workers([spec([hp] * n)])
            else:
                [pack] = _worker.run_workers([spec([hp] * n)])
                alone = _worker.run_workers([spec([hp], indices=[j]) for j in range(n)])
            rows.append(self._row(n, batch, alone, pack, limit, source))
        return rows

    @staticmethod
    def _row(n: int, batch: int, alone: Sequence[_worker.WorkerResult],
             pack: _worker.WorkerResult, limit: int, source: str) -> dict[str, Any]:
        notes = [r.note for r in (*alone, pack) if r.note]
        row: dict[str, Any] = {"num_models": n, "batch_size": batch,
                               "memory_limit_mb": limit / MB}
        if all(r.status == OK for r in alone):
            steps = [r.median_step_ms for r in alone]
            total = sum(r.peak_bytes for r in alone)
            row.update(ts_concurrent_ms=max(steps), ts_concurrent_mean_ms=sum(steps) / n,
                       peak_memory_concurrent_mb=total / MB, status_concurrent=OK)
            if total > limit:
                row["status_concurrent"] = OUT_OF_MEMORY
                notes.append(f"{n} processes peaked at {total / MB:.0f} MB together > {source}")
        else:
            row["status_concurrent"] = OUT_OF_MEMORY
        row["status_pack"] = pack.status
        if pack.status == OK:
            row.update(ts_pack_ms=pack.median_step_ms, peak_memory_pack_mb=pack.peak_bytes / MB)
            if pack.peak_bytes > limit:
                row["status_pack"] = OUT_OF_MEMORY
                notes.append(f"the pack process peaked at {pack.peak_bytes / MB:.0f} MB > "
                             f"{source}")
        if row.get("ts_concurrent_ms") and row.get("ts_pack_ms"):
            row["concurrent_over_pack"] = row["ts_concurrent_ms"] / row["ts_pack_ms"]
        row["note"] = "; ".join(notes)
        return row

    def objective(self, rows: Sequence[Mapping[str, Any]]) -> float:
        """The largest Ts(concurrent) / Ts(Pack): above 1, the pack is faster."""
        values = [r["concurrent_over_pack"] for r in rows if r.get("concurrent_over_pack")]
        return max(values) if values else float("nan")

    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        fig, (times, memory) = figure(2)
        for i, n in enumerate(self.num_models):
            mine = [r for r in rows if r["num_models"] == n]
            for ax, key, label, style in (
                    (times, "ts_concurrent_ms", f"{n} processes at once", "--"),
                    (times, "ts_pack_ms", f"one pack of {n}", "-"),
                    (memory, "peak_memory_concurrent_mb", f"{n} processes, summed", "--"),
                    (memory, "peak_memory_pack_mb", f"one pack of {n}", "-")):
                done = [r for r in mine if r.get(key) is not None]
                ax.plot([r["batch_size"] for r in done], [r[key] for r in done], style,
                        marker="o" if style == "-" else "s", color=f"C{i}", label=label)
        peaks = [r[k] for r in rows for k in ("peak_memory_concurrent_mb", "peak_memory_pack_mb")
                 if r.get(k) is not None] or [1.0]
        limit = rows[0]["memory_limit_mb"] if rows else None
        if limit is not None and limit < 3 * max(peaks):
            memory.axhline(limit, color="tab:red", linestyle="--", linewidth=1,
                           label=f"memory limit {limit:.0f} MB")
        mark_out_of_memory(memory, rows, "batch_size", 0.05 * max(peaks), "status_concurrent")
        mark_out_of_memory(memory, rows, "batch_size", 0.15 * max(peaks), "status_pack")
        for ax, ylabel in ((times, "step time (ms), median"), (memory, "peak memory (MB)")):
            ax.set_xlabel("batch size")
            ax.set_ylabel(ylabel)
            ax.set_xticks(list(self.batch_sizes))
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        fig.suptitle(title(ctx, "Section 4.7: one pack against concurrent training processes"),
                     fontsize=10)
        return save(fig, path)
