"""Figure 4's sweep: N identical members per (N, batch size) point, until memory runs out."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from packexp.packing import Member
from packexp.profile.base import MB, OK, OUT_OF_MEMORY, Profile, ProfileContext
from packexp.profile.figures import figure, mark_out_of_memory, save
from packexp.profile.peak import peak_note, shares
from packexp.profile.timing import PackTimer, compare

log = logging.getLogger(__name__)

SWEEP_COLUMNS = ("num_models", "batch_size", "ts_seq_ms", "ts_pack_ms", "impv", "impv_low",
                 "impv_high", "repeats", "seq_xla", "pack_xla", "fused", "seq_peak_share",
                 "pack_peak_share", "matmul_peak_gflops", "predicted_memory_mb",
                 "memory_limit_mb", "status", "note")


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
        row.update(result.row(), **shares(members[:n], result.ts_seq_ms, result.ts_pack_ms),
                   status=OK)
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
    left.errorbar(xs, [100 * r["impv"] for r in done], yerr=_yerr(done), marker="o",
                  color="tab:blue", capsize=3,
                  label="IMPV = (Ts(Seq) - Ts(Pack)) / Ts(Seq), median and range")
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
    note = peak_note(done)
    fig.suptitle(f"{heading}\n{note}" if note else heading, fontsize=10)
    return save(fig, path)


def _yerr(rows: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    """Error bars from each row's range of repeated IMPVs (none where it has no range)."""
    low = [100 * (r["impv"] - r["impv_low"]) if r.get("impv_low") is not None else 0.0
           for r in rows]
    high = [100 * (r["impv_high"] - r["impv"]) if r.get("impv_high") is not None else 0.0
            for r in rows]
    return [low, high]
