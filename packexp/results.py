"""Arithmetic over a search's records: phase totals, the cost model's prediction error and the
speedup over sequential training. It reads ``results.json``-shaped dicts and writes nothing."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np


def prediction_error(packs: list[dict]) -> float | None:
    """Median relative error of the packs' ``predicted_s`` against their ``duration_s``."""

    errors = [abs(p["predicted_s"] - p["duration_s"]) / p["duration_s"] for p in packs
              if p.get("predicted_s") is not None and p.get("duration_s")]
    return round(statistics.median(errors), 4) if errors else None



# A pack's time by phase, in its record and summed over the search (see README).
PHASES = ("build_s", "trace_s", "train_s", "eval_s", "checkpoint_s", "probe_s")


def speedup_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """``speedup_vs_sequential_estimate``: sequential training time over packed, estimated.

    Ts(Seq) is estimated member by member: the steps it trained in its pack times the step
    time of a singleton pack of the same run at the nearest batch size (interpolated
    between batch sizes). Ts(Pack) is the packs' measured training time. Only training
    steps count, not step-function builds. Without a singleton pack there is nothing to
    estimate a member's time alone from, and nothing is returned.

    Args:
        results: ``results.json``'s content: ``packs``, ``trials``, ``continue_on_promotion``.

    Returns:
        The speedup and both times in seconds, or {} when the run has no singleton pack.
    """
    trials = {t["trial_id"]: t for t in results["trials"]}
    alone: dict[int, list[float]] = {}
    for pack in results["packs"]:
        if len(pack["members"]) == 1 and pack["steps"] > 0 and pack["train_s"] > 0:
            batch = trials[pack["members"][0]]["hparams"]["batch_size"]
            alone.setdefault(batch, []).append(pack["train_s"] / pack["steps"])
    if not alone:
        return {}
    sizes = sorted(alone)
    per_step = [float(np.median(alone[b])) for b in sizes]
    sequential = packed = 0.0
    for pack in results["packs"]:
        packed += pack["train_s"]
        for member in pack["members"]:
            rungs = trials[member]["rungs"]
            i = next(k for k, r in enumerate(rungs) if r["pack_id"] == pack["pack_id"])
            before = rungs[i - 1]["steps"] if i and results.get("continue_on_promotion") else 0
            batch = trials[member]["hparams"]["batch_size"]
            sequential += (rungs[i]["steps"] - before) * float(np.interp(batch, sizes, per_step))
    if packed <= 0:
        return {}
    return {"speedup_vs_sequential_estimate": sequential / packed,
            "sequential_train_s_estimate": sequential, "packed_train_s": packed}
