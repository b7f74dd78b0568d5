"""Rules that read profile tables against the paper's findings, and can say they disagree."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packexp.errors import is_number as finite

AGREES = "agrees"
PARTLY = "partly differs"
DIFFERS = "differs"
INCONCLUSIVE = "inconclusive"

Row = Mapping[str, Any]

# The ablation's factors (profile=ablation: two members alike or not in each), as its table
# names them.
FACTORS = ("model", "data", "preprocess", "optimizer", "batch_size")
# Each factor's column: True where the two members are alike (or, for preprocess, where
# decoding runs in the step).
COLUMN = {"model": "same_model", "data": "same_data", "preprocess": "preprocess_in_step",
          "optimizer": "same_optimizer", "batch_size": "same_batch_size"}
# A factor left out of ``factors`` keeps this value.
HELD = {"model": True, "data": True, "preprocess": False, "optimizer": True,
        "batch_size": True}
LABELS = {"model": ("same", "different"), "data": ("same", "different"),
          "preprocess": ("in step", "pre-decoded"), "optimizer": ("same", "different"),
          "batch_size": ("same", "different")}

# The ablation's factors as the paper reads them (section 4.4 and the premise of its kNN
# heuristic, "models that are similar pack well together"): +1 where the paper finds the
# alike arm packs better, None where it states no direction. Data and batch size are the
# paper's best scenarios, so they should lead the order.
PAPER_DIRECTION: dict[str, int | None] = {"data": 1, "batch_size": 1, "model": 1,
                                          "optimizer": 1, "preprocess": None}
PAPER_LEADERS = ("data", "batch_size")


@dataclass(frozen=True)
class Finding:
    """One reading: the model's name, the verdict against the paper, and why."""

    name: str
    verdict: str
    text: str

    def __str__(self) -> str:
        return f"**{self.name}:** {self.verdict}: {self.text}."


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def ok(rows: Sequence[Row], key: str = "status") -> list[Row]:
    return [r for r in rows if r.get(key) == "ok"]


def row_noise(rows: Sequence[Row]) -> float:
    """The widest range of repeated IMPVs in ``rows``: how far two points may differ by noise."""
    widths = [r["impv_high"] - r["impv_low"] for r in rows
              if finite(r.get("impv_high")) and finite(r.get("impv_low"))]
    return max(widths, default=0.0)


def slower_beyond_noise(row: Row, noise: float) -> bool:
    """Packing slower than sequential by more than the noise (the whole range below 0)."""
    if finite(row.get("impv_high")):
        return row["impv_high"] < 0 and row["impv"] < -noise
    return row["impv"] < -noise



def _measured(rows: Sequence[Row], key: str, point: str, like: str) -> tuple[list[Row], str]:
    """The rows that ran, sorted by ``key``, and the clause for where memory stopped the
    sweep (``point`` formats that row's ``key``; empty when nothing ran out of memory)."""
    done = sorted(ok(rows), key=lambda r: r[key])
    stop = next((r for r in rows if r.get("status") == "out_of_memory"), None)
    stopped = (f"; stopped at {point.format(stop[key])} on the memory limit, {like}"
               if stop else "")
    return done, stopped


def read_growth(name: str, rows: Sequence[Row], noise: float = 0.0,
                paper_best: float | None = None) -> Finding:
    """Figure 4a: "as the number of packed models increases so do the relative benefits until
    the resources are saturated".

    Agrees when IMPV rises beyond the noise from the smallest N to its best, never falls
    beyond the noise on the way, and levels off (or keeps rising) after it.

    Args:
        name: The model's name (from its experiment file).
        rows: The profile's rows, by increasing N.
        noise: The noise of one IMPV, on top of each row's own range.
        paper_best: The paper's best IMPV for this model, where it gives one.
    """
    done, stopped = _measured(rows, "num_models", "N={}",
                              "as the paper's DenseNet-121 did")
    if len(done) < 2:
        return Finding(name, INCONCLUSIVE, f"only {len(done)} value of N measured{stopped}")
    noise = max(noise, row_noise(done))
    impvs = [r["impv"] for r in done]
    peak = max(range(len(done)), key=lambda i: impvs[i])
    rise = impvs[peak] - impvs[0]
    steady = all(b >= a - noise for a, b in itertools.pairwise(impvs[:peak + 1]))
    fall = impvs[peak] - min(impvs[peak:])
    series = ", ".join(f"N={r['num_models']} {pct(r['impv'])}" for r in done)
    size = ""
    if paper_best is not None:
        size = (f"; best {pct(impvs[peak])} against the paper's up to {pct(paper_best)} for "
                "this model on a GPU")
    if impvs[peak] <= noise:
        verdict, why = DIFFERS, (f"packing never pays beyond the noise ({100 * noise:.1f} "
                                 f"points): {series}")
    elif rise <= noise or not steady:
        verdict, why = DIFFERS, (f"IMPV does not grow with N beyond the noise "
                                 f"({100 * noise:.1f} points): {series}")
    elif fall > noise:
        verdict, why = PARTLY, (f"IMPV grows to {pct(impvs[peak])} at "
                                f"N={done[peak]['num_models']}, then falls by "
                                f"{100 * fall:.1f} points, beyond the noise, where the paper "
                                f"saw it level off: {series}")
    else:
        level = ("and levels off after it" if peak < len(done) - 1 else
                 "still rising at the largest N measured")
        verdict, why = AGREES, (f"IMPV grows with N by {100 * rise:.1f} points, beyond the "
                                f"noise, to {pct(impvs[peak])} at "
                                f"N={done[peak]['num_models']}, {level}: {series}")
    return Finding(name, verdict, f"{why}{size}{stopped}")


def read_batch(name: str, rows: Sequence[Row], noise: float = 0.0) -> Finding:
    """Figure 4b: IMPV "has a negligible improvement" as the batch grows.

    Agrees when IMPV's spread over the batch sizes is within twice the noise or under 15
    points; differs when it moves beyond both, naming the trend.
    """
    done, stopped = _measured(rows, "batch_size", "batch size {}",
                              "as the paper's larger models did")
    if len(done) < 2:
        return Finding(name, INCONCLUSIVE, f"only {len(done)} batch size measured{stopped}")
    noise = max(noise, row_noise(done))
    impvs = [r["impv"] for r in done]
    spread = max(impvs) - min(impvs)
    series = ", ".join(f"batch {r['batch_size']} {pct(r['impv'])}" for r in done)
    falling = all(a > b for a, b in itertools.pairwise(impvs))
    rising = all(a < b for a, b in itertools.pairwise(impvs))
    if spread <= 2 * noise:
        verdict, why = AGREES, (f"IMPV moves {100 * spread:.1f} points over the batch sizes, "
                                f"within twice the noise ({100 * noise:.1f} points): {series}")
    elif spread < 0.15:
        verdict, why = AGREES, f"IMPV changes little with batch size: {series}"
    else:
        trend = ("falls steadily as the batch grows: on a CPU a larger batch already keeps "
                 "the cores busy, leaving less for packing to fill" if falling else
                 "rises steadily" if rising else "varies without a trend")
        verdict, why = DIFFERS, (f"IMPV {trend}, over {100 * spread:.0f} points, more than "
                                 f"twice the noise: {series}")
    return Finding(name, verdict, f"{why}{stopped}")


def factor_effects(rows: Sequence[Row], columns: Mapping[str, str]) -> dict[str, float]:
    """Each varied factor's mean IMPV with its members alike minus with them different."""
    effects = {}
    for factor, column in columns.items():
        alike = [r["impv"] for r in rows if r[column]]
        unlike = [r["impv"] for r in rows if not r[column]]
        if alike and unlike:
            effects[factor] = statistics.mean(alike) - statistics.mean(unlike)
    return effects


def read_ablation(name: str, rows: Sequence[Row], columns: Mapping[str, str],
                  labels: Mapping[str, tuple[str, str]], noise: float = 0.0) -> Finding:
    """Figure 5: "the best scenarios are where the same training data and same batch size are
    used"; with the same data packing "always brings benefits"; similar models pack better.

    Every factor is shown, in the order of its effect, with its direction against the
    paper's. Agrees only when no factor goes against the paper beyond the noise, data and
    batch size lead the order, and no same-data combination packs slower beyond the noise.

    Args:
        name: The model's name.
        rows: The ablation's rows.
        columns: Each factor's column (True where the members are alike).
        labels: Each factor's (alike, different) wording.
        noise: The noise of one IMPV, on top of each row's own range.
    """
    done = ok(rows)
    if not done:
        return Finding(name, INCONCLUSIVE, "no combination measured")
    noise = max(noise, row_noise(done))
    effects = factor_effects(done, columns)
    order = sorted(effects, key=effects.get, reverse=True)
    parts, against, weak = [], [], []
    for factor in order:
        effect, direction = effects[factor], PAPER_DIRECTION.get(factor)
        alike, unlike = labels[factor]
        words = factor.replace("_", " ")
        if abs(effect) <= noise:
            reading = "no difference beyond the noise"
            if factor in PAPER_LEADERS:
                weak.append(factor)
        else:
            better = alike if effect > 0 else unlike
            reading = f"{better} packed better"
            if direction is not None and effect * direction < 0:
                reading += ", against the paper"
                against.append(factor)
            elif direction is not None:
                reading += ", as in the paper"
        parts.append(f"{words} {100 * effect:+.1f} points ({reading})")
    leaders = [f for f in PAPER_LEADERS if f in effects]
    others = [f for f in order if f not in leaders]
    lead = all(effects[f] > max((effects[o] for o in others), default=-1.0) for f in leaders)
    slower = [r for r in done if slower_beyond_noise(r, noise)]
    same_data = [r for r in slower if r.get(columns.get("data", ""), False)]
    summary = (f"factors by the gain of alike over different members (mean IMPV): "
               f"{'; '.join(parts)}; {len(slower)} of {len(done)} combinations pack slower "
               f"beyond the noise ({100 * noise:.1f} points)")
    if same_data:
        summary += f", {len(same_data)} of them with the same data, against the paper"
    if leaders and not lead:
        summary += f"; {' and '.join(f.replace('_', ' ') for f in leaders)} do not lead the order"
    if any(f in PAPER_LEADERS for f in against):
        verdict = DIFFERS
    elif against or weak or same_data or not lead:
        verdict = PARTLY
    else:
        verdict = AGREES
    return Finding(name, verdict, summary)


def read_switch(name: str, row: Row, paper: Sequence[float]) -> Finding:
    """Table 2: "the switching overhead is minor compared to the overall training time".

    Agrees when SwOH's share of Te(Seq) is no more than twice the paper's (its noise-free
    GPU share), or within noise of nothing; otherwise says how many epochs would bring the
    share down to the paper's, since SwOH is paid per switch, not per epoch.

    Args:
        name: The model's name.
        row: One switch_overhead row (te_seq_s, swoh_s, te_single_sum_s).
        paper: The paper's Te(Seq), Te(single) and SwOH in seconds.
    """
    share = row["swoh_s"] / row["te_seq_s"]
    paper_share = paper[2] / paper[0]
    text = f"SwOH is {pct(share)} of Te(Seq) against the paper's {pct(paper_share)}"
    if share <= 2 * paper_share:
        return Finding(name, AGREES, f"{text}: minor, as in the paper")
    per_epoch = row["te_single_sum_s"] / row.get("epochs", 1)
    epochs = row["swoh_s"] * (1 - paper_share) / (paper_share * per_epoch)
    return Finding(name, DIFFERS, (f"{text}, more than twice it: an epoch here is short, so "
                                   f"the fixed switch weighs more; it would take about "
                                   f"{epochs:.0f} epochs per switch to fall to the paper's "
                                   "share, as the paper argues it amortizes"))
