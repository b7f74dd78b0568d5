"""Pictures of a search from its results: a Gantt chart of packs, best accuracy over time."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TIMELINE = "timeline.png"
BEST_SO_FAR = "best_so_far.png"


def write_plots(results: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Draws ``timeline.png`` and ``best_so_far.png`` into ``out_dir``.

    A plot that cannot be drawn is a warning: pictures never fail a finished search.

    Returns:
        The files written.
    """
    written = []
    for name, draw in ((TIMELINE, timeline), (BEST_SO_FAR, best_so_far)):
        try:
            written.append(draw(results, Path(out_dir) / name))
        except Exception as e:
            log.warning("could not draw %s: %s", name, e)
    return written


def pack_spans(packs: list[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """Each pack's (start, end) in seconds since the search began, on one clock.

    A resumed run's packs restart their clock at each session; later sessions are moved
    to begin where the earlier one's last pack ended. Records without ``started_s`` start
    ``build_s + train_s`` before they ended; without ``elapsed_s`` they follow each other.
    """
    spans: list[tuple[float, float]] = []
    offset = last_raw_end = last_end = 0.0
    for pack in packs:
        busy = float(pack.get("build_s", 0.0)) + float(pack.get("train_s", 0.0))
        end = pack.get("elapsed_s")
        if end is None:
            start = last_end
            spans.append((start, start + busy))
            last_end = start + busy
            continue
        start = pack.get("started_s", end - busy)
        if start < last_raw_end - 1e-6:  # a new session's clock
            offset = last_end
        last_raw_end = end
        spans.append((offset + start, offset + end))
        last_end = offset + end
    return spans


def timeline(results: Mapping[str, Any], path: Path) -> Path:
    """A Gantt chart: one row per trial, one bar per pack it trained in, coloured by pack."""
    plt = _pyplot()
    trials = {t["trial_id"]: t for t in results["trials"]}
    packs = results["packs"]
    spans = pack_spans(packs)
    order: list[str] = []
    for pack in packs:
        order += [m for m in pack["members"] if m not in order]
    order += [t for t in trials if t not in order]
    row = {trial_id: i for i, trial_id in enumerate(order)}
    height = min(60.0, 1.6 + 0.24 * len(order))
    fig, ax = plt.subplots(figsize=(12, height))
    palette = plt.get_cmap("tab10")
    idle_from = 0.0
    for start, end in spans:
        if start - idle_from > 0.01:
            ax.axvspan(idle_from, start, color="0.92", zorder=0)
        idle_from = max(idle_from, end)
    for k, (pack, (start, end)) in enumerate(zip(packs, spans, strict=True)):
        color = palette(k % 10)
        build = min(float(pack.get("build_s", 0.0)), end - start)
        train = min(float(pack.get("train_s", 0.0)), end - start - build)
        rows = [row[m] for m in pack["members"]]
        for r in rows:
            ax.barh(r, end - start, left=start, height=0.8, color=color, alpha=0.35,
                    edgecolor=color, linewidth=0.6)
            ax.barh(r, train, left=start + build, height=0.8, color=color, linewidth=0)
        for m in pack["members"]:
            acc = next((r["val_accuracy"] for r in trials[m]["rungs"]
                        if r["pack_id"] == pack["pack_id"]), None)
            ax.text(end, row[m], " ✗" if acc is None else f" {acc:.2f}", va="center",
                    fontsize=6, color="firebrick" if acc is None else "dimgray")
        if len(rows) > 1:  # a singleton's row already names it
            ax.text((start + end) / 2, min(rows) - 0.5,
                    f"{pack['pack_id']} ({len(rows)}, {pack['epochs']:g} ep)", ha="center",
                    va="bottom", fontsize=6.5, fontweight="bold")
    brackets = [trials[t]["bracket"] for t in order]
    for i in range(1, len(order)):
        if brackets[i] != brackets[i - 1]:
            ax.axhline(i - 0.5, color="gray", linewidth=0.6, linestyle="--")
    labels = [f"{t}  bs {trials[t]['hparams'].get('batch_size', '?')} "
              f"{trials[t]['hparams'].get('optimizer', '')} [{trials[t]['status']}]"
              for t in order]
    ax.set_yticks(range(len(order)), labels, fontsize=7)
    ax.set_ylim(len(order) - 0.4, -1.2)
    ax.set_xlabel("seconds since the search started")
    ax.set_xlim(0, max((e for _, e in spans), default=1.0) * 1.08)
    ax.grid(axis="x", linewidth=0.3)
    ax.set_title(f"{results.get('strategy', '?')} packing of {results.get('model', '?')} on "
                 f"{results.get('dataset', '?')}: {len(packs)} packs, {len(order)} trials; "
                 "a row per trial, a bar per pack it trained in (labelled: packs of 2+)",
                 fontsize=10)
    from matplotlib.patches import Patch

    fig.legend(handles=[
        Patch(color=palette(0), alpha=0.35, label="pack's span: members built, step function "
                                                  "built, evaluation"),
        Patch(color=palette(0), label="training steps (train_s), after the build"),
        Patch(color="0.92", label="between packs: planning, memory probes, checkpoints"),
    ], loc="lower center", ncol=3, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def best_so_far(results: Mapping[str, Any], path: Path) -> Path:
    """Best validation accuracy found against wall time, over every evaluation as a dot."""
    plt = _pyplot()
    spans = pack_spans(results["packs"])
    ended = {p["pack_id"]: end for p, (_, end) in zip(results["packs"], spans, strict=True)}
    points = sorted((ended[r["pack_id"]], r["val_accuracy"], t["bracket"], r["epochs"])
                    for t in results["trials"] for r in t["rungs"]
                    if r["val_accuracy"] is not None and r["pack_id"] in ended)
    fig, ax = plt.subplots(figsize=(9, 5))
    end = max((e for _, e in spans), default=1.0)
    if points:
        times: list[float] = []
        best: list[float] = []
        for when, acc, _, _ in points:
            if times and times[-1] == when:
                best[-1] = max(best[-1], acc)
            else:
                times.append(when)
                best.append(max(acc, best[-1]) if best else acc)
        ax.step([*times, end], [*best, best[-1]], where="post", color="black", linewidth=2,
                label="best so far")
        for bracket in sorted({p[2] for p in points}, reverse=True):
            mine = [p for p in points if p[2] == bracket]
            ax.scatter([p[0] for p in mine], [p[1] for p in mine],
                       s=[12 + 6 * p[3] for p in mine], alpha=0.6,
                       label=f"bracket {bracket} evaluation (size: epochs)")
        ax.annotate(f"{best[-1]:.4f}", (times[-1], best[-1]), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)
        ax.legend(loc="best", fontsize=8)
    ax.set_xlim(0, end * 1.05)
    ax.set_xlabel("seconds since the search started")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(linewidth=0.3)
    ax.set_title(f"Best validation accuracy over wall time ({results.get('strategy', '?')} "
                 f"packing, {results.get('model', '?')} on {results.get('dataset', '?')})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, safe in threads and on servers
    import matplotlib.pyplot as plt

    return plt
