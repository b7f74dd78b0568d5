"""Arithmetic over a search's records: phase totals and the cost model's prediction error.
Pure Python: it reads ``results.json``-shaped dicts and writes nothing."""

from __future__ import annotations

import statistics


def prediction_error(packs: list[dict]) -> float | None:
    """Median relative error of the packs' ``predicted_s`` against their ``duration_s``."""

    errors = [abs(p["predicted_s"] - p["duration_s"]) / p["duration_s"] for p in packs
              if p.get("predicted_s") is not None and p.get("duration_s")]
    return round(statistics.median(errors), 4) if errors else None



# A pack's time by phase, in its record and summed over the search (see README).
PHASES = ("build_s", "trace_s", "train_s", "eval_s", "checkpoint_s", "probe_s")
