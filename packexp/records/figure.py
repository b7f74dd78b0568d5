"""Figures laid out once: ``records.plots``'s figures, made without pyplot, and
``lay_out``, which the profiles' pyplot figures share; ``log_scaled`` and ``clipped_range``,
their value axes' rules."""

from __future__ import annotations

import io
from typing import Any


def lay_out(fig: Any, **tight: Any) -> None:
    """``fig.tight_layout(**tight)``, once. The placeholder layout engine it leaves behind
    makes every later ``savefig`` (and a notebook's PNG) draw the whole figure one more time
    to lay out what is laid out already; without an engine the picture is the same, pixel for
    pixel, drawn once (docs/BENCHMARKS.md, "Plots drawn once")."""
    fig.tight_layout(**tight)
    fig.set_layout_engine(None)


def log_scaled(values: list[float]) -> bool:
    """Whether a value axis is logarithmic: every value positive, spanning over 100 times
    (one near-diverged trial's loss would flatten the rest to a line at 0)."""
    return bool(values) and min(values) > 0 and max(values) > 100 * min(values)


def clipped_range(values: list[float], kept: list[float]) -> tuple[float, float] | None:
    """A value axis's range where a log axis cannot serve (a value at or below 0, as an
    R\u00b2 of -1e18 is) and a few outliers would flatten the rest: the values within 50
    median absolute deviations of the median, and every one of ``kept`` (the best so far),
    padded 5%; None where the outliers stretch the axis less than 100 times that range."""
    if len(values) < 3:
        return None
    ordered = sorted(values)
    median = _median(ordered)
    spread = _median(sorted(abs(v - median) for v in values)) or abs(median) or 1.0
    inside = [v for v in values if abs(v - median) <= 50 * spread] + list(kept)
    low, high = min(inside), max(inside)
    span = (high - low) or spread
    if ordered[-1] - ordered[0] <= 100 * span:
        return None
    return low - 0.05 * span, high + 0.05 * span


def _median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def new_figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A figure and its axes made without pyplot: no backend is chosen or changed (a
    notebook keeps its own), nothing global is kept, and threads may draw. A notebook shows
    the figure as a PNG."""
    fig = png_figure_class()(figsize=size)
    return fig, fig.subplots()


_PngFigure = None


def png_figure_class() -> type:
    """``PngFigure``: a matplotlib ``Figure`` a notebook shows as a PNG (made once, when
    first drawn, so that importing this module imports no matplotlib)."""
    global _PngFigure
    if _PngFigure is None:
        from matplotlib.figure import Figure

        class PngFigure(Figure):
            def _repr_png_(self) -> bytes:
                buffer = io.BytesIO()
                self.savefig(buffer, format="png", dpi=90)
                return buffer.getvalue()

        PngFigure.__qualname__ = PngFigure.__name__  # found by pickle in this module
        _PngFigure = PngFigure
        globals()["PngFigure"] = PngFigure
    return _PngFigure
