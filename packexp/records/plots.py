"""Pictures of a search from its results: a Gantt chart of packs, the best objective value over
time."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packexp.objectives import NAMES as NAME
from packexp.objectives import measured
from packexp.records.crowd import crowd_figure, crowded
from packexp.records.figure import (
    clipped_range,
    lay_out,
    log_scaled,
    new_figure,
    png_figure_class,
)
from packexp.records.timeline import (  # noqa: F401 (plots' names for them, as before)
    IDLE_COLOR,
    OTHER,
    PHASE_COLORS,
    PHASE_LABELS,
    pack_spans,
    phase_segments,
    phase_totals,
    rows_figure,
    train_share,
    worker_lanes,
)

if TYPE_CHECKING:
    from packexp.records.facts import Searched

log = logging.getLogger(__name__)

TIMELINE = "timeline.png"
PREDICTED = "predicted.png"
BEST_SO_FAR = "best_so_far.png"
POPULATION = "population.png"
PARETO = "pareto.png"


def timeline(result: Searched, path: Path) -> Path:
    """Saves ``timeline_figure(result)`` to ``path``."""
    timeline_figure(result).savefig(path, dpi=110)
    return path


def timeline_figure(result: Searched) -> Any:
    """Which trial trained in which pack, phase by phase: a row per trial
    (``timeline.rows_figure``), or past ``crowd.MAX_ROWS`` trials or ``crowd.MAX_PACKS`` packs
    the packs' occupancy over time, the workers' lanes and the best trials
    (``crowd.crowd_figure``)."""
    return crowd_figure(result) if crowded(result) else rows_figure(result)


def write_plots(result: Searched, out_dir: Path) -> list[Path]:
    """Draws a search's (``SearchResult.write_plots``) ``timeline.png``,
    ``best_so_far.png``, where packs carry a cost model's ``predicted_s`` ``predicted.png``,
    for a population (``scheduler=pbt``) ``population.png``, and under several objectives
    ``pareto.png`` into ``out_dir``.

    A plot that cannot be drawn is a warning: pictures never fail a finished search.

    Returns:
        The files written.
    """
    written = []
    drawings = [(TIMELINE, timeline), (BEST_SO_FAR, best_so_far)]
    if any(p.predicted_s is not None for p in result.pack_records):
        drawings.append((PREDICTED, predicted_vs_measured))
    if any(t.lineage for t in result.trial_records):
        drawings.append((POPULATION, population))
    if result.front:
        drawings.append((PARETO, pareto))
    for name, draw in drawings:
        try:
            written.append(draw(result, Path(out_dir) / name))
        except Exception as e:
            log.warning("could not draw %s: %s", name, e)
    return written


def best_so_far(result: Searched, path: Path) -> Path:
    """Saves ``best_so_far_figure(result)`` to ``path``."""
    best_so_far_figure(result).savefig(path, dpi=110)
    return path


def evaluations(result: Searched, spans: list[tuple[float, float]] | None = None,
                ) -> list[tuple[float, float, int, float]]:
    """Every scored rung as (seconds since the search started when its pack ended, its
    objective value, bracket, epochs), in time order; ``spans``: ``pack_spans``, where
    drawn already."""
    objective, packs = result.tuned_for, result.pack_records
    spans = pack_spans(packs) if spans is None else spans
    ended = {p.pack_id: end for p, (_, end) in zip(packs, spans, strict=True)}
    return sorted((ended[r.pack_id], value, t.bracket, r.epochs)
                  for t in result.trial_records for r in t.rungs
                  if (value := objective.value(r)) is not None and r.pack_id in ended)


def best_so_far_points(result: Searched,
                       points: list[tuple[float, float, int, float]] | None = None,
                       ) -> list[tuple[float, float]]:
    """(seconds, best objective value so far) at each pack's end that improved it;
    ``points``: ``evaluations(result)``, where made already."""
    objective = result.tuned_for
    best: list[tuple[float, float]] = []
    for when, value, _, _ in evaluations(result) if points is None else points:
        if best and objective.signed(value) <= objective.signed(best[-1][1]):
            continue
        if best and best[-1][0] == when:  # the same pack's members: its best
            best[-1] = (when, value)
        else:
            best.append((when, value))
    return best


def best_so_far_figure(result: Searched) -> Any:
    """The best objective value found against wall time, over every evaluation as a dot."""
    objective = result.tuned_for
    spans = pack_spans(result.pack_records)
    points = evaluations(result, spans)
    best = best_so_far_points(result, points)
    fig, ax = new_figure((9, 5))
    end = max((e for _, e in spans), default=1.0)
    if best:
        times, values = [t for t, _ in best], [v for _, v in best]
        ax.step([*times, end], [*values, values[-1]], where="post", color="black",
                linewidth=2, label="best so far")
        by_bracket: dict[int, list] = {}
        for p in points:
            by_bracket.setdefault(p[2], []).append(p)
        for bracket in sorted(by_bracket, reverse=True):
            # Arrays: scatter reads a list of numbers one number at a time.
            when, value, _, epochs = np.array(by_bracket[bracket], dtype=float).T
            ax.scatter(when, value, s=12 + 6 * epochs, alpha=0.6,
                       label=f"bracket {bracket} evaluation (size: epochs)")
        ax.annotate(f"{values[-1]:.4f}", (times[-1], values[-1]), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)
        if log_scaled([p[1] for p in points]):
            ax.set_yscale("log")
        elif objective.metric != "val_accuracy" and (
                clip := clipped_range([p[1] for p in points], values)) is not None:
            _clip_axis(ax, points, *clip)
        ax.legend(loc="best", fontsize=8)
    ax.set_xlim(0, end * 1.05)
    ax.set_xlabel("seconds since the search started")
    ax.set_ylabel(objective.name)
    if objective.metric == "val_accuracy":
        ax.set_ylim(0, 1.02)
    ax.grid(linewidth=0.3)
    facts = result.facts
    ax.set_title(f"Best {objective.label} over wall time ({facts.strategy or '?'} "
                 f"packing, {facts.model or '?'} on {facts.dataset or '?'})", fontsize=10)
    lay_out(fig)
    return fig


def _clip_axis(ax: Any, points: list[tuple[float, float, int, float]], low: float,
               high: float) -> None:
    """The value axis from ``low`` to ``high``, each evaluation beyond it a triangle at the
    edge it passed (``gid``: ``off axis``), their values in the legend."""
    ax.set_ylim(low, high)
    for edge, marker, beyond in ((high, "^", lambda v: v > high), (low, "v", lambda v: v < low)):
        off = [p for p in points if beyond(p[1])]
        if off:
            shown = ", ".join(f"{p[1]:.3g}" for p in off[:3])
            ax.scatter([p[0] for p in off], [edge] * len(off), marker=marker, s=40,
                       color="firebrick", clip_on=False, zorder=3, gid="off axis",
                       label=f"off the axis ({len(off)}): {shown}"
                             + (f" and {len(off) - 3} more" if len(off) > 3 else ""))


def predicted_vs_measured(result: Searched, path: Path) -> Path:
    """Each pack's predicted duration against its measured one, log-log, fused or plain."""
    packs = [p for p in result.pack_records if p.predicted_s and p.duration_s]
    fig, ax = new_figure((6, 5.5))
    for fused, color, label in ((False, "#0072B2", "plain"), (True, "#D55E00", "fused")):
        mine = [p for p in packs if bool(p.fused) == fused]
        if mine:
            predicted, took, size = np.array(
                [(p.predicted_s, p.duration_s, len(p.members)) for p in mine], dtype=float).T
            ax.scatter(predicted, took, s=14 + 8 * size, alpha=0.6, color=color,
                       label=f"{label} pack (size: members)")
    values = [v for p in packs for v in (p.predicted_s, p.duration_s)]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.plot([low, high], [low, high], color="black", linewidth=1, label="prediction = measured")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("predicted duration (s)")
    ax.set_ylabel("measured duration_s (s)")
    ax.grid(linewidth=0.3, which="both")
    ax.legend(loc="upper left", fontsize=8)
    error = result.totals.prediction_error
    ax.set_title(f"Cost model: {len(packs)} packs of {result.facts.model or '?'} on "
                 f"{result.facts.dataset or '?'}"
                 + (f", median relative error {error:.0%}" if error is not None else ""),
                 fontsize=10)
    lay_out(fig)
    fig.savefig(path, dpi=110)
    return path


def pareto(result: Searched, path: Path) -> Path:
    """Saves ``pareto_figure(result)`` to ``path``."""
    pareto_figure(result).savefig(path, dpi=110)
    return path


def pareto_figure(result: Searched) -> Any:
    """Every trial at its last scored rung in the first two goals, the Pareto front joined."""
    objective = result.tuned_for
    (x_name, _), (y_name, _) = objective.goals[:2]
    points = []
    for t in result.trial_records:
        scored = [r for r in t.rungs if objective.scores(r) is not None]
        if scored:
            points.append((t.trial_id, measured(scored[-1], x_name),
                           measured(scored[-1], y_name)))
    front = {e.trial_id for e in result.front or ()}
    fig, ax = new_figure((7, 5))
    ax.scatter([p[1] for p in points if p[0] not in front],
               [p[2] for p in points if p[0] not in front], s=18, alpha=0.5, color="0.55",
               label="trial (its last scored rung)")
    on = sorted((p for p in points if p[0] in front), key=lambda p: p[1])
    ax.plot([p[1] for p in on], [p[2] for p in on], "o-", color="#D55E00",
            label=f"Pareto front ({len(on)} trials)")
    for (x, y), ids in same_points(on).items():  # one label for trials at one point
        ax.annotate(", ".join(ids[:3]) + (f" +{len(ids) - 3}" if len(ids) > 3 else ""),
                    (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(NAME.get(x_name, x_name))
    ax.set_ylabel(NAME.get(y_name, y_name))
    if "params" in (x_name, y_name):  # model sizes span orders of magnitude
        (ax.set_xscale if x_name == "params" else ax.set_yscale)("log")
    ax.grid(linewidth=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"Pareto front ({' and '.join(f'{n} {m}' for n, m in objective.goals)})",
                 fontsize=10)
    lay_out(fig)
    return fig


def same_points(points: list[tuple[str, float, float]]) -> dict[tuple[float, float], list[str]]:
    """The trials at each distinct point, in the points' order."""
    at: dict[tuple[float, float], list[str]] = {}
    for trial_id, x, y in points:
        at.setdefault((x, y), []).append(trial_id)
    return at


def population(result: Searched, path: Path) -> Path:
    """Saves ``population_figure(result)`` to ``path``."""
    population_figure(result).savefig(path, dpi=110)
    return path


def population_figure(result: Searched) -> Any:
    """A population's scores and hyper-parameters over its epochs: one line per member, a
    dot where it copied another (its line jumps to the donor's weights there), and the best
    member's schedule in black, followed back through the members whose weights it copied."""
    trials = result.trial_records
    names = list(trials[0].hparams) if trials else []
    fig = png_figure_class()(figsize=(9, 2.2 * (1 + len(names))))
    axes = fig.subplots(1 + len(names), 1, sharex=True, squeeze=False)[:, 0]
    ends = sorted({r.epochs for t in trials for r in t.rungs})
    by_id = {t.trial_id: t for t in trials}
    schedule = (None if result.best is None else result.best.schedule) or []
    for i, t in enumerate(trials):
        color = f"C{i % 10}"
        axes[0].plot([0.0] + [r.epochs for r in t.rungs],
                     [None] + [r.val_accuracy for r in t.rungs], color=color, alpha=0.6,
                     linewidth=1)
        for e in t.lineage:
            donor = by_id[e.donor].rungs
            at = next((r.val_accuracy for r in donor if r.epochs == e.epoch), None)
            axes[0].plot([e.epoch], [at], "o", color=color, markersize=4)
        for ax, name in zip(axes[1:], names, strict=True):
            x = [0.0, *ends]
            values = [t.hparams_at(e)[name] for e in ends]  # a string: a category of the axis
            ax.step(x, [*values, values[-1]], where="post", color=color, alpha=0.6,
                    linewidth=1)
    for stretch in schedule:
        record = by_id[stretch["trial_id"]]
        mine = [r for r in record.rungs if stretch["from"] < r.epochs <= stretch["to"]]
        axes[0].plot([r.epochs for r in mine], [r.val_accuracy for r in mine], color="black",
                     linewidth=2.2)
        for ax, name in zip(axes[1:], names, strict=True):
            value = stretch["hparams"][name]
            ax.plot([stretch["from"], stretch["to"]], [value, value], color="black",
                    linewidth=2.2)
    axes[0].set_ylabel("validation accuracy")
    axes[0].set_title(f"Population of {len(trials)} ({result.facts.model or '?'} on "
                      f"{result.facts.dataset or '?'}): scores and values by epoch; dots: "
                      "exploits; black: the best's schedule", fontsize=10)
    for ax, name in zip(axes[1:], names, strict=True):
        values = [t.hparams_at(e)[name] for t in trials for e in ends]
        if all(isinstance(v, int | float) and v > 0 for v in values) and (
                max(values) > 10 * min(values)):
            ax.set_yscale("log")
        ax.set_ylabel(name)
    for ax in axes:
        ax.grid(linewidth=0.3)
    axes[-1].set_xlabel("epochs")
    lay_out(fig)
    return fig
