"""Arithmetic over a search's record: totals, the best so far, the cost model's error, the
parent run's metrics, the speedup over sequential training. It writes nothing."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from packexp.objectives import ACCURACY, Objective
from packexp.records.facts import SearchTotals
from packexp.records.record import PackRecord, TrialRecord

if TYPE_CHECKING:
    from packexp.records.facts import Searched

# A pack's time by phase, in its record and summed over the search (see README).
PHASES = PackRecord.PHASES


def totals(trials: Sequence[TrialRecord], packs: Sequence[PackRecord], *,
           wall_time_s: float, objective: Objective = ACCURACY) -> SearchTotals:
    """The search's ``packs`` and ``trials`` summed up: time by phase, the training share of
    ``wall_time_s``, reuse, programs, the cost model's error, epochs spent, ``anytime``."""
    phases = {k: round(sum(getattr(p, k) for p in packs), 4) for k in PHASES}
    return SearchTotals(
        phases=phases,
        # A search that sent no pack (its budget spent first) searched for no time.
        train_share=round(phases["train_s"] / wall_time_s, 4) if wall_time_s > 0 else 0.0,
        reused_packs=sum(p.reused for p in packs), programs=sum(p.programs for p in packs),
        eval_programs=sum(p.eval_programs for p in packs),
        reused_members=sum(p.reused_members for p in packs),
        prediction_error=prediction_error(packs),
        epochs_spent=round(sum(p.epochs_spent for p in packs), 4),
        anytime=anytime(trials, packs, objective))


def anytime(trials: Sequence[Any], packs: Sequence[PackRecord],
            objective: Objective = ACCURACY) -> list[dict[str, Any]]:
    """The best objective value so far at each pack's end, in the order packs finished:
    against the search's wall time (``elapsed_s``, a resumed run's sessions laid end to
    end) and the epochs spent so far (``epochs``, every member's trained epochs summed), so
    searches compare at equal time or budget."""
    offsets = session_offsets([(p.session, p.elapsed_s) for p in packs])
    by_pack: dict[str, float] = {}  # each pack's best score
    for t in trials:
        for r in t.rungs:
            if (score := objective.score(r)) is not None:
                by_pack[r.pack_id] = max(by_pack.get(r.pack_id, -math.inf), score)
    points, spent, best = [], 0.0, None
    if all(p.elapsed_s is not None for p in packs):  # in the order they ended: under Ray a
        # pack published after another (plan order) may have ended before it
        packs = sorted(packs, key=lambda p: p.elapsed_s + offsets.get(p.session, 0.0))
    for p in packs:
        spent += p.epochs_spent
        if p.pack_id in by_pack:
            best = by_pack[p.pack_id] if best is None else max(best, by_pack[p.pack_id])
        elapsed = None if p.elapsed_s is None else round(
            p.elapsed_s + offsets.get(p.session, 0.0), 4)
        points.append({"pack_id": p.pack_id, "elapsed_s": elapsed,
                       "epochs": round(spent, 4), "best": objective.signed(best)})
    return points


def session_offsets(ends: Sequence[tuple[int | None, float | None]]) -> dict[int, float]:
    """Where each session's clock begins on the run's one clock: the sessions before it
    laid end to end, each as long as its last pack's ``elapsed_s``.

    Args:
        ends: Each pack's ``(session, elapsed_s)``; packs without a session are left out.
    """
    last: dict[int, float] = {}
    for session, elapsed in ends:
        if session is not None and elapsed is not None:
            last[session] = max(last.get(session, 0.0), elapsed)
    offsets, total = {}, 0.0
    for session in sorted(last):
        offsets[session], total = total, total + last[session]
    return offsets


def search_metrics(result: Searched) -> dict[str, float | None]:
    """The parent run's summary metrics of a search (``SearchResult.metrics``): the best's
    every recorded metric as ``best_<name>`` (``best_val_loss``, a regression's
    ``best_val_r2``) beside ``best_value``, the search's times and totals."""
    best, facts, totals = result.best, result.facts, result.totals
    value = None if best is None else best.value
    return {"wall_time_s": result.wall_time_s,
            "best_val_accuracy": math.nan if best is None or best.val_accuracy is None
            else best.val_accuracy,
            "best_value": math.nan if value is None else value,
            **({} if best is None else {f"best_{k}": float(v) for k, v in best.metrics.items()
                                        if k not in ("val_accuracy", "value")
                                        and isinstance(v, (int, float))}),
            "startup_s": facts.startup_s, "train_share": totals.train_share,
            **{f"startup_{k}_s": v for k, v in (facts.startup or {}).items()},
            "calibration_s": facts.calibration_s,
            "prediction_error_median": totals.prediction_error,
            **{f"total_{k}": v for k, v in totals.phases.items()},
            **pack_metrics(result.pack_records), **speedup_metrics(result)}


def pack_metrics(packs: Sequence[PackRecord]) -> dict[str, float]:
    """The search's packs summed up for the parent run, where a pack's own metric shows the
    last pack only: ``median_step_time_ms``, the median time of a pack step over every step
    the search trained; ``median_member_step_time_ms``, over every member's step (a pack
    step's time shared by its members); ``max_peak_rss_mb``, the most resident memory a
    pack's process held. Each is left out where no pack measured it."""
    timed = [p for p in packs if p.step_time_ms is not None and p.steps > 0 and p.members]
    metrics: dict[str, float] = {}
    if timed:
        metrics["median_step_time_ms"] = weighted_median(
            [p.step_time_ms for p in timed], [p.steps for p in timed])
        metrics["median_member_step_time_ms"] = weighted_median(
            [p.step_time_ms / len(p.members) for p in timed],
            [p.steps * len(p.members) for p in timed])
    rss = [p.peak_rss_mb for p in packs if p.peak_rss_mb]
    if rss:
        metrics["max_peak_rss_mb"] = max(rss)
    return metrics


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value at half the total weight, the values in increasing order (the lower of two
    where half falls between them)."""
    half, total = sum(weights) / 2, 0.0
    for value, weight in sorted(zip(values, weights, strict=True)):
        total += weight
        if total >= half:
            return float(value)
    raise ValueError("weighted_median of no values")


def prediction_error(packs: Sequence[PackRecord]) -> float | None:
    """Median relative error of the packs' ``predicted_s`` against their ``duration_s``."""
    errors = [abs(p.predicted_s - p.duration_s) / p.duration_s for p in packs
              if p.predicted_s is not None and p.duration_s]
    return round(statistics.median(errors), 4) if errors else None


def speedup_metrics(result: Searched) -> dict[str, float]:
    """``speedup_vs_sequential_estimate``: sequential training time over packed, estimated.

    Ts(Seq) is estimated member by member: the steps it trained in its pack times the step
    time of a singleton pack of the same run at the nearest batch size (interpolated
    between batch sizes). Ts(Pack) is the packs' measured training time. Only training
    steps count, not step-function builds. Without a singleton pack there is nothing to
    estimate a member's time alone from, and nothing is returned.

    Returns:
        The speedup and both times in seconds, or {} when the run has no singleton pack.
    """
    packs = result.pack_records
    trials = {t.trial_id: t for t in result.trial_records}
    alone: dict[int, list[float]] = {}
    for pack in packs:
        if len(pack.members) == 1 and pack.steps > 0 and pack.train_s > 0:
            batch = trials[pack.members[0]].hparams_at(pack.epochs)["batch_size"]
            alone.setdefault(batch, []).append(pack.train_s / pack.steps)
    if not alone:
        return {}
    sizes = sorted(alone)
    per_step = [float(np.median(alone[b])) for b in sizes]
    packed = 0.0
    steps, batches = [], []  # each member's steps in its pack, at its batch size
    for pack in packs:
        packed += pack.train_s
        for member in pack.members:
            trial = trials[member]
            rungs = trial.rungs
            i = next(k for k, r in enumerate(rungs) if r.pack_id == pack.pack_id)
            batch = trial.hparams_at(rungs[i].epochs)["batch_size"]  # a population's: its own
            before = 0
            if i and result.facts.continue_on_promotion:
                before = rungs[i - 1].steps
                if trial.hparams_at(rungs[i - 1].epochs)["batch_size"] != batch:
                    before = round(rungs[i].steps * rungs[i - 1].epochs / rungs[i].epochs)
            steps.append(rungs[i].steps - before)
            batches.append(batch)
    # One interpolation for every member, summed in the members' order as before.
    sequential = 0.0
    for n, seconds in zip(steps, np.interp(batches, sizes, per_step).tolist(), strict=True):
        sequential += n * seconds
    if packed <= 0:
        return {}
    return {"speedup_vs_sequential_estimate": sequential / packed,
            "sequential_train_s_estimate": sequential, "packed_train_s": packed}
