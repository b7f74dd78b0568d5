"""A search's time by phase, from its packs' records, and the Gantt chart of its packs
(``timeline.png``): a row per trial, a bar per pack split by phase, a lane per Ray worker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.records.figure import lay_out, new_figure
from packexp.records.record import PackRecord

if TYPE_CHECKING:
    from packexp.records.facts import Searched
    from packexp.records.record import TrialRecord

# A pack's phases in drawing order, with their colours (Okabe-Ito, told apart with colour
# blindness); the keys are packexp.records.results.PHASES, and a test keeps the two in step.
PHASE_COLORS = {"build_s": "#56B4E9", "trace_s": "#E69F00", "train_s": "#009E73",
                "eval_s": "#0072B2", "checkpoint_s": "#CC79A7", "probe_s": "#D55E00"}
OTHER = "other"  # time in a pack's span that no phase timer covers
OTHER_COLOR = "0.72"
IDLE_COLOR = "0.93"
PHASE_LABELS = {
    "build_s": "build (models, member states)", "trace_s": "trace (step, evaluation functions)",
    "train_s": "train (steps)", "eval_s": "evaluation", "checkpoint_s": "checkpoints",
    "probe_s": "memory probes (before the pack)", OTHER: "rest of the pack's span",
}
# The phases a pack's record times beyond its build and training steps: a record older
# than the phase timings lacks them, and reads each as 0.
TIMED = tuple(k for k in PackRecord.PHASES if k not in ("build_s", "train_s"))


def pack_spans(packs: Sequence[PackRecord]) -> list[tuple[float, float]]:
    """Each pack's (start, end) in seconds since the search began, on one clock.

    A resumed run's packs restart their clock at each session; later sessions are moved
    to begin where the earlier one's last pack ended. Records without ``started_s`` start
    ``build_s + train_s`` before they ended; without ``elapsed_s`` they follow each other.
    """
    spans: list[tuple[float, float]] = []
    if packs and all(p.session is not None and p.elapsed_s is not None for p in packs):
        return _spans_by_session(packs)
    offset = last_raw_end = last_end = 0.0
    for pack in packs:
        busy = float(pack.build_s) + float(pack.train_s)
        end = pack.elapsed_s
        if end is None:
            start = last_end
            spans.append((start, start + busy))
            last_end = start + busy
            continue
        start = end - busy if pack.started_s is None else pack.started_s
        if start < last_raw_end - 1e-6:  # a new session's clock
            offset = last_end
        last_raw_end = end
        spans.append((offset + start, offset + end))
        last_end = offset + end
    return spans


def _spans_by_session(packs: Sequence[PackRecord]) -> list[tuple[float, float]]:
    """Spans of packs that name their session: each session's clock begins where the
    sessions before it ended. Packs of one session may overlap (several workers)."""
    from packexp.records.results import session_offsets

    offsets = session_offsets([(p.session, float(p.elapsed_s)) for p in packs])
    out = []
    for p in packs:
        end = float(p.elapsed_s)
        busy = float(p.build_s) + float(p.train_s)
        start = end - busy if p.started_s is None else p.started_s
        out.append((offsets[p.session] + start, offsets[p.session] + end))
    return out


def phase_totals(result: Searched) -> dict[str, float]:
    """Each phase's seconds summed over the packs: ``totals.phases``, or summed here for
    results written before it existed (a missing phase counts 0)."""
    phases = result.totals.phases
    if phases:
        return {phase: float(phases.get(phase) or 0.0) for phase in PHASE_COLORS}
    return {phase: round(sum(float(getattr(p, phase) or 0.0) for p in result.pack_records), 4)
            for phase in PHASE_COLORS}


def train_share(result: Searched) -> float | None:
    """Training steps' share of the search's wall time; None without a wall time."""
    share = result.totals.train_share
    # Recorded with the phases; 0.0 without them is the default of results written before.
    if share is not None and (share or result.totals.phases):
        return float(share)
    wall = float(result.wall_time_s or 0.0)
    return phase_totals(result)["train_s"] / wall if wall > 0 else None


def timed(pack: PackRecord, summed: bool = False) -> bool:
    """Whether ``pack``'s record has its time by phase: every pack of a search whose totals
    sum the phases (``summed``: ``totals.phases``) has; of an older search, a pack that
    spent time in any phase but its build and training steps."""
    return summed or any(getattr(pack, phase) for phase in TIMED)


def phase_segments(pack: PackRecord, start: float, end: float, free_from: float = 0.0,
                   summed: bool = False) -> list[tuple[str, float, float]]:
    """A pack's phases as ``(phase, left, width)`` bars for its span ``start..end``.

    Build, trace, train, evaluation and checkpoint follow each other from ``start`` (tracing
    really happens between training chunks: the bars show amounts, not order), and the rest
    of the span is ``other``. Memory probes run while the rung is planned, before the pack
    starts, so the probe bar ends at ``start``, no earlier than ``free_from``. Records
    older than the phase timings (not ``timed(pack, summed)``) have no segments.
    """
    if not timed(pack, summed):
        return []
    segments = []
    left = start
    for phase in PHASE_COLORS:
        width = min(float(getattr(pack, phase) or 0.0), end - left)
        if phase == "probe_s" or width <= 1e-9:
            continue
        segments.append((phase, left, width))
        left += width
    if end - left > 1e-9:
        segments.append((OTHER, left, end - left))
    probe = min(float(pack.probe_s or 0.0), start - free_from)
    if probe > 1e-9:
        segments.append(("probe_s", start - probe, probe))
    return segments


def rows_figure(result: Searched) -> Any:
    """A Gantt chart: one row per trial, one bar per pack it trained in, split by phase (a
    search too large for a row each is drawn by ``crowd.crowd_figure``; ``plots.timeline``
    chooses).

    Each bar's segments (their patches' ``gid`` is the phase) come from ``phase_segments``;
    packs recorded before the phase timings draw their span and training steps only.
    """
    import matplotlib
    from matplotlib.patches import Patch

    trials = {t.trial_id: t for t in result.trial_records}
    packs = result.pack_records
    spans = pack_spans(packs)
    summed = bool(result.totals.phases)
    # Each trial's row in the order it first trained, then those that never did.
    order = list(dict.fromkeys([*(m for pack in packs for m in pack.members), *trials]))
    lanes = worker_lanes(packs)  # under executor=ray: a lane per worker, above the trials
    row = {trial_id: len(lanes) + i for i, trial_id in enumerate(order)}
    height = min(60.0, 1.9 + 0.24 * (len(lanes) + len(order)))
    fig, ax = new_figure((12, height))
    palette = matplotlib.colormaps["tab10"]
    idle_from = 0.0
    for start, end in sorted(spans):  # several workers' packs overlap
        if start - idle_from > 0.01:
            ax.axvspan(idle_from, start, color=IDLE_COLOR, zorder=0, gid="idle")
        idle_from = max(idle_from, end)
    drawn: dict[str, float] = {}
    objective = result.tuned_for
    last_end: dict[str, float] = {}  # each trial's last pack's end
    old_records = False
    free_from = 0.0
    for k, (pack, (start, end)) in enumerate(zip(packs, spans, strict=True)):
        rows = [row[m] for m in pack.members]
        if pack.worker is not None:
            rows.append(lanes[lane_of(pack)][0])
        segments = phase_segments(pack, start, end, free_from, summed)
        free_from = end
        for phase, left, width in segments:
            _bars(ax, rows, left, width, color=_phase_color(phase), linewidth=0, gid=phase)
            drawn[phase] = drawn.get(phase, 0.0) + width
        if segments:
            _bars(ax, rows, start, end - start, fill=False, edgecolor="0.3", linewidth=0.4,
                  gid="pack")
        else:
            old_records = True
            color = palette(k % 10)
            build = min(float(pack.build_s), end - start)
            train = min(float(pack.train_s), end - start - build)
            _bars(ax, rows, start, end - start, color=color, alpha=0.35, linewidth=0.6)
            _bars(ax, rows, start + build, train, color=color, linewidth=0)
        for m in pack.members:
            value = next((objective.value(r) for r in trials[m].rungs
                          if r.pack_id == pack.pack_id), None)
            last_end[m] = end
            if value is not None:  # a diverged member's end is its status mark
                ax.text(end, row[m], f"  {value:.3g}", va="center", fontsize=6,
                        color="dimgray")
        if lanes and pack.worker is not None:
            ax.text((start + end) / 2, lanes[lane_of(pack)][0], pack.pack_id,
                    ha="center", va="center", fontsize=5.5, clip_on=True)
        if len(pack.members) > 1:  # a singleton's row already names it
            ax.text((start + end) / 2, min(row[m] for m in pack.members) - 0.5,
                    f"{pack.pack_id} ({len(pack.members)}, {pack.epochs:g} ep"
                    f"{', reused' if pack.reused else ''})", ha="center",
                    va="bottom", fontsize=6.5, fontweight="bold")
    ends = _end_marks(ax, trials, last_end, row)
    brackets = [trials[t].bracket for t in order]
    for i in range(1, len(order)):
        if brackets[i] != brackets[i - 1]:
            ax.axhline(len(lanes) + i - 0.5, color="gray", linewidth=0.6, linestyle="--")
    if lanes:
        ax.axhline(len(lanes) - 0.5, color="0.2", linewidth=0.9)
    labels = [label for _, label in sorted(lanes.values())] + [
        f"{t}  bs {trials[t].hparams.get('batch_size', '?')} "
        f"{trials[t].hparams.get('optimizer', '')} [{trials[t].status}]" for t in order]
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.4, -1.2)
    ax.set_xlabel("seconds since the search started")
    ax.set_xlim(0, max((e for _, e in spans), default=1.0) * 1.08)
    ax.grid(axis="x", linewidth=0.3)
    ax.set_title(f"{_named(result)}: {len(packs)} packs, {len(order)} trials; "
                 + (f"a lane per worker ({len(lanes)}), then " if lanes else "")
                 + "a row per trial, a bar per pack it trained in (labelled: packs of 2+)"
                 + (f"\n{_phase_caption(result)}" if drawn else ""), fontsize=9.5)
    totals = {**phase_totals(result), OTHER: drawn.get(OTHER, 0.0)}
    handles = [Patch(color=_phase_color(phase),
                     label=f"{PHASE_LABELS[phase]}: {totals[phase]:.1f} s")
               for phase in (*PHASE_COLORS, OTHER) if phase in drawn]
    if old_records:
        handles += [
            Patch(color=palette(0), alpha=0.35, label="pack's span: members built, step "
                                                      "function built, evaluation"),
            Patch(color=palette(0), label="training steps (train_s), after the build"),
        ]
    handles += ends
    # Before the phase timings, checkpoints and probes fell between packs.
    handles.append(Patch(color=IDLE_COLOR, label="between packs: planning, logging" if drawn
                         else "between packs: planning, memory probes, checkpoints"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=7.5,
               frameon=False)
    legend_rows = -(-len(handles) // 4)
    lay_out(fig, rect=(0, (0.15 + 0.2 * legend_rows) / height, 1, 1))
    return fig


def worker_lanes(packs: Sequence[PackRecord]) -> dict[tuple, tuple[int, str]]:
    """Each worker that trained a pack (``executor=ray``'s packs name theirs) to its lane's
    row and label (``worker 1 · <host> <node>``), by ``lane_of`` the pack; none for a local
    run. A resumed run's sessions number their workers afresh: a lane per session's worker,
    its label naming the session."""
    where = {lane_of(p): (p.host, p.node) for p in packs if p.worker is not None}
    sessions = len({session for session, _ in where}) > 1
    return {lane: (i, f"worker {lane[1]}{f' (session {lane[0]})' if sessions else ''} · "
                      f"{host or '?'} {(node or '?')[:8]}")
            for i, (lane, (host, node)) in enumerate(
                sorted(where.items(), key=lambda item: (item[0][0] or 0, item[0][1])))}


def lane_of(pack: PackRecord) -> tuple:
    """The lane a pack trained on: its session and its worker's number."""
    return pack.session, pack.worker


def _bars(ax: Any, rows: list[int], left: float, width: float, **style: Any) -> None:
    """One bar of ``width`` from ``left`` on each of ``rows``, as ``barh`` with height 0.8
    draws it, but added without ``barh``'s per-bar work: no data limits are updated (the
    timeline sets its own) and no container is made. A Gantt chart of a long search has
    thousands of bars; this keeps its drawing a fraction of a second."""
    from matplotlib.patches import Rectangle

    for r in rows:
        ax.add_artist(Rectangle((left, r - 0.4), width, 0.8, **style))


# How a trial's row ends: cut by the scheduler is a neutral stop, diverged a red cross.
END_MARKS = {"killed": ("s", "0.45", "stopped by the scheduler (killed)"),
             "failed": ("X", "firebrick", "failed (diverged)")}


def _end_marks(ax: Any, trials: Mapping[str, TrialRecord], last_end: Mapping[str, float],
               row: Mapping[str, int]) -> list[Any]:
    """Marks each killed or failed trial's row at its last pack's end (``gid``: the status);
    returns the marks drawn, for the legend."""
    handles = []
    for status, (marker, color, label) in END_MARKS.items():
        if ended := [t for t in last_end if trials[t].status == status]:
            handles += ax.plot([last_end[t] for t in ended], [row[t] for t in ended],
                               linestyle="none", marker=marker, markersize=4, color=color,
                               gid=status, label=label)
    return handles


def _phase_color(phase: str) -> str:
    return PHASE_COLORS.get(phase, OTHER_COLOR)


def _named(result: Searched) -> str:
    """``<strategy> packing of <model> on <dataset>``, as the titles open."""
    facts = result.facts
    return (f"{facts.strategy or '?'} packing of {facts.model or '?'} on "
            f"{facts.dataset or '?'}")


def _phase_caption(result: Searched) -> str:
    share, wall = train_share(result), result.wall_time_s
    totals = ", ".join(f"{phase.removesuffix('_s')} {seconds:.1f}"
                       for phase, seconds in phase_totals(result).items())
    parts = [f"{totals} s"]
    if share is not None and wall:
        parts.insert(0, f"training {share:.0%} of the {wall:.1f} s search")
    if result.facts.startup_s is not None:
        parts.append(f"first pack {result.facts.startup_s:.1f} s after the command")
    return "; ".join(parts)
