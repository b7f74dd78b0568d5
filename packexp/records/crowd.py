"""The timeline of a search too large for a row per trial: every trial's time by phase as an
area over time, the best trials a row each, and a lane per worker (``timeline.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from packexp.records.figure import lay_out, png_figure_class
from packexp.records.timeline import (
    IDLE_COLOR,
    OTHER,
    PHASE_COLORS,
    PHASE_LABELS,
    _end_marks,
    _named,
    _phase_caption,
    _phase_color,
    lane_of,
    pack_spans,
    phase_segments,
    phase_totals,
    timed,
    worker_lanes,
)

if TYPE_CHECKING:
    from packexp.records.facts import Searched
    from packexp.records.record import PackRecord, RungResult, TrialRecord

# Past these a row per trial is a blur taller than a screen (the row chart's height stops
# at 60 inches, 242 rows) and its text takes minutes to draw; the paper's Hyperband (R=81:
# 143 trials, 206 packs unpacked) still gets its rows.
MAX_ROWS = 200
MAX_PACKS = 400
BEST_ROWS = 25  # the trials drawn a row each
MAX_LANES = 32  # more workers than this are the area's, not a lane each
BINS = 400  # time bins of the area: about three pixels each at the figure's width
PHASES = (*PHASE_COLORS, OTHER)


def crowded(result: Searched) -> bool:
    """Whether ``result`` is drawn by ``crowd_figure`` rather than a row per trial."""
    return len(result.trial_records) > MAX_ROWS or len(result.pack_records) > MAX_PACKS


def pack_segments(packs: Sequence[PackRecord], spans: Sequence[tuple[float, float]],
                  summed: bool = False) -> list[list[tuple[str, float, float]]]:
    """Each pack's ``(phase, left, width)`` bars, as the row chart draws them
    (``phase_segments``; ``summed``: the search's totals sum the phases); a pack recorded
    before the phase timings is its build, its training steps and the rest of its span."""
    out = []
    free_from = 0.0
    for pack, (start, end) in zip(packs, spans, strict=True):
        segments = phase_segments(pack, start, end, free_from, summed)
        free_from = end
        if not segments:
            build = min(float(pack.build_s), end - start)
            train = min(float(pack.train_s), end - start - build)
            segments = [(phase, left, width) for phase, left, width in (
                ("build_s", start, build), ("train_s", start + build, train),
                (OTHER, start + build + train, end - start - build - train)) if width > 1e-9]
        out.append(segments)
    return out


def occupancy(packs: Sequence[PackRecord],
              segments: Sequence[Sequence[tuple[str, float, float]]], end: float,
              bins: int = BINS) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """How many trials are in each phase, on average over each of ``bins`` equal bins of
    ``0..end``: the row chart's bars of that colour a vertical line crosses, a pack's
    counting once per member.

    Returns:
        The bins' edges and, for each phase with any time, its mean count in each bin.
    """
    edges = np.linspace(0.0, max(end, 1e-9), bins + 1)
    rows = [(PHASES.index(phase), left, width, len(pack.members))
            for pack, bars in zip(packs, segments, strict=True) for phase, left, width in bars]
    if not rows:
        return edges, {}
    phase, left, width, weight = np.array(rows, dtype=float).T
    counts = {}
    for i, name in enumerate(PHASES):
        mine = phase == i
        if mine.any():
            counts[name] = _binned(left[mine], width[mine], weight[mine], edges)
    return edges, counts


def _binned(left: np.ndarray, width: np.ndarray, weight: np.ndarray,
            edges: np.ndarray) -> np.ndarray:
    """The mean over each bin of the sum of ``weight`` over the intervals covering a moment:
    the integral ``F(t) = sum(d_e * (t - t_e))`` over the intervals' starts (+weight) and
    ends (-weight) before ``t``, differenced at the edges. Linear in the intervals."""
    times = np.concatenate([left, left + width])
    steps = np.concatenate([weight, -weight])
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    level, moment = np.cumsum(steps), np.cumsum(steps * times)
    at = np.searchsorted(times, edges, side="right") - 1
    inside = at >= 0
    area = np.zeros_like(edges)
    area[inside] = edges[inside] * level[at[inside]] - moment[at[inside]]
    return np.maximum(np.diff(area) / np.diff(edges), 0.0)


def best_trials(result: Searched,
                k: int = BEST_ROWS) -> list[tuple[TrialRecord, RungResult]]:
    """The ``k`` trials best by the objective at their best scored rung, best first (of two
    as good, the one drawn first), each with that rung."""
    objective = result.tuned_for
    scored = []
    for i, trial in enumerate(result.trial_records):
        rungs = [(s, r) for r in trial.rungs if (s := objective.score(r)) is not None]
        if rungs:
            score, rung = max(rungs, key=lambda sr: sr[0])
            scored.append((-score, i, trial, rung))
    return [(trial, rung) for _, _, trial, rung in sorted(scored, key=lambda s: s[:2])[:k]]


def idle_gaps(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ``(left, width)`` of each stretch in which no pack ran, as the row chart shades."""
    gaps, idle_from = [], 0.0
    for start, end in sorted(spans):  # several workers' packs overlap
        if start - idle_from > 0.01:
            gaps.append((idle_from, start - idle_from))
        idle_from = max(idle_from, end)
    return gaps


def crowd_figure(result: Searched) -> Any:
    """``timeline.png`` of a large search: above, how many trials were in each phase at each
    moment (``occupancy``, stacked); below, a lane per worker (up to ``MAX_LANES``) and the
    ``BEST_ROWS`` best trials a row each, their packs split by phase as in the row chart.

    Its artists are bounded, whatever the search's size: one area per phase above, one
    patch per phase below (``_boxes``), a text per row; the caption says what is aggregated
    and how many trials are not drawn one by one.
    """
    from matplotlib.patches import Patch

    packs = result.pack_records
    spans = pack_spans(packs)
    segments = pack_segments(packs, spans, bool(result.totals.phases))
    end = max((e for _, e in spans), default=1.0)
    edges, counts = occupancy(packs, segments, end)
    best = best_trials(result)
    lanes = worker_lanes(packs)
    workers = len(lanes)
    if workers > MAX_LANES:
        lanes = {}
    row = {t.trial_id: len(lanes) + i for i, (t, _) in enumerate(best)}
    rows = len(lanes) + len(best)
    chart = 0.3 + 0.24 * max(rows, 1)
    height = 2.6 + chart + 2.1
    fig = png_figure_class()(figsize=(12, height))
    area, ax = fig.subplots(2, 1, sharex=True, height_ratios=[2.6, chart])
    gaps = idle_gaps(spans)
    for axes in (area, ax):
        _idle(axes, gaps, edges)
    below = np.zeros(len(edges) - 1)
    for phase in PHASES:
        if phase in counts:
            area.stairs(below + counts[phase], edges, baseline=below.copy(), fill=True,
                        color=_phase_color(phase), linewidth=0, gid=phase)
            below = below + counts[phase]
    area.set_ylim(0, max(float(below.max(initial=0.0)), 1.0) * 1.1)
    area.set_ylabel("trials (mean per bin)")
    area.grid(axis="x", linewidth=0.3)

    boxes: dict[str, list] = {}
    outlines, last_end, value_at = [], {}, {}
    best_rung = {t.trial_id: r.pack_id for t, r in best}
    for pack, (start, stop), bars in zip(packs, spans, segments, strict=True):
        mine = [row[m] for m in pack.members if m in row]
        # A lane's packs are outlined by their gaps: thousands of outlines would paint it black.
        for r in mine + ([lanes[lane_of(pack)][0]] if lanes and pack.worker is not None
                         else []):
            for phase, left, width in bars:
                boxes.setdefault(phase, []).append((left, r - 0.4, width, 0.8))
        outlines += [(start, r - 0.4, stop - start, 0.8) for r in mine]
        for m in pack.members:
            if m in row:
                last_end[m] = stop
                if best_rung[m] == pack.pack_id:
                    value_at[m] = stop
    for phase in PHASES:
        if phase in boxes:
            _boxes(ax, boxes[phase], color=_phase_color(phase), linewidth=0, gid=phase)
    _boxes(ax, outlines, fill=False, edgecolor="0.3", linewidth=0.4, gid="pack")
    objective = result.tuned_for
    for t, rung in best:
        if t.trial_id in value_at:
            ax.text(value_at[t.trial_id], row[t.trial_id],
                    f"  {objective.value(rung):.3g}", va="center", fontsize=6, color="dimgray")
    by_id = {t.trial_id: t for t, _ in best}
    ends = _end_marks(ax, by_id, last_end, row)
    if lanes:
        ax.axhline(len(lanes) - 0.5, color="0.2", linewidth=0.9)
    labels = [label for _, label in sorted(lanes.values())] + [
        f"#{i + 1} {t.trial_id}  bs {t.hparams.get('batch_size', '?')} "
        f"{t.hparams.get('optimizer', '')} [{t.status}]" for i, (t, _) in enumerate(best)]
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(max(len(labels), 1) - 0.4, -0.6)
    ax.set_xlabel("seconds since the search started")
    ax.set_xlim(0, end * 1.08)
    ax.grid(axis="x", linewidth=0.3)
    area.set_title(_title(result, len(best), workers, len(lanes), edges), fontsize=9.5)

    drawn = {phase for phase in PHASES if phase in counts}
    other = sum(width for bars in segments for phase, _, width in bars if phase == OTHER)
    totals = {**phase_totals(result), OTHER: other}
    handles = [Patch(color=_phase_color(phase),
                     label=f"{PHASE_LABELS[phase]}: {totals[phase]:.1f} s")
               for phase in PHASES if phase in drawn]
    handles += ends
    handles.append(Patch(color=IDLE_COLOR, label="no pack running: planning, logging "
                                                 f"({sum(w for _, w in gaps):.1f} s; shaded "
                                                 "by its share of each bin)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=7.5,
               frameon=False)
    legend_rows = -(-len(handles) // 4)
    lay_out(fig, rect=(0, (0.15 + 0.2 * legend_rows) / height, 1, 1), h_pad=0.4)
    return fig


def _idle(ax: Any, gaps: Sequence[tuple[float, float]], edges: np.ndarray) -> None:
    """Each bin shaded by the share of it in which no pack ran: a search's thousands of
    gaps drawn one by one are each narrower than a pixel, and their full-height rectangles
    take seconds to rasterise."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgb

    if not gaps:
        return
    left, width = np.array(gaps, dtype=float).T
    share = np.minimum(_binned(left, width, np.ones_like(left), edges), 1.0)
    shaded = np.flatnonzero(share > 1e-3)
    grey = np.array(to_rgb(IDLE_COLOR))
    ax.add_collection(PolyCollection(
        [[(edges[i], 0), (edges[i], 1), (edges[i + 1], 1), (edges[i + 1], 0)] for i in shaded],
        facecolors=[1 - share[i] * (1 - grey) for i in shaded], linewidths=0, zorder=0,
        gid="idle", transform=ax.get_xaxis_transform()), autolim=False)


def _title(result: Searched, shown: int, workers: int, lanes: int,
           edges: np.ndarray) -> str:
    trials, packs = len(result.trial_records), len(result.pack_records)
    lines = [
        f"{_named(result)}: {packs:,} packs, {trials:,} trials",
        "too many for a row each: above, the trials in a pack at each moment, by the pack's "
        f"phase (the mean over bins of {edges[1] - edges[0]:.3g} s);",
        "below, " + (f"a lane per worker ({lanes}), then " if lanes else "")
        + f"the {shown} best trials a row each, best first: {trials - shown:,} trials are not "
        "drawn one by one" + (f" ({workers} workers: too many for a lane each)"
                              if workers > lanes else ""),
    ]
    summed = bool(result.totals.phases)
    if any(timed(p, summed) for p in result.pack_records):
        lines.append(_phase_caption(result))
    return "\n".join(lines)


def _boxes(ax: Any, boxes: Sequence[tuple[float, float, float, float]], **style: Any) -> None:
    """``(left, bottom, width, height)`` rectangles as one patch of one compound path: one
    artist and one draw however many there are (a collection draws each one apart, and the
    lanes of a large search have tens of thousands)."""
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path

    if not boxes:
        return
    left, bottom, width, height = np.array(boxes, dtype=float).T
    right, top = left + width, bottom + height
    corners = np.stack([np.stack(xy, axis=1) for xy in (
        (left, bottom), (left, top), (right, top), (right, bottom), (left, bottom))], axis=1)
    codes = np.tile([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY],
                    len(boxes))
    # add_artist: add_patch would walk every vertex in Python for the data limits, which the
    # caller sets.
    ax.add_artist(PathPatch(Path(corners.reshape(-1, 2), codes), **style))
