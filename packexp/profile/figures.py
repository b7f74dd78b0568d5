"""A profile's figure: ``profile.png``, its axes, title and out-of-memory marks."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.profile.base import OUT_OF_MEMORY, ProfileContext
from packexp.records.figure import lay_out
from packexp.telemetry import tf_gpu_name

FIGURE_NAME = "profile.png"


def figure(ncols: int = 1, width: float = 6.0, height: float = 4.2):
    """A matplotlib figure with ``ncols`` axes, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    lay_out(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def title(ctx: ProfileContext, what: str) -> str:
    return f"{what}\n{ctx.names['model']} on {ctx.names['dataset']}, {device_name()}"


def device_name() -> str:
    name = tf_gpu_name()
    return name if name is not None else f"CPU ({os.cpu_count()} cores)"


def mark_out_of_memory(ax: Any, rows: Sequence[Mapping[str, Any]], x: str, y: float,
                       status: str = "status") -> None:
    """Draws a red cross labelled OOM at each point that hit the memory limit."""
    for row in rows:
        if row.get(status) == OUT_OF_MEMORY:
            ax.plot([row[x]], [y], marker="x", color="tab:red", markersize=12, mew=3,
                    linestyle="none")
            ax.annotate("OOM", (row[x], y), textcoords="offset points", xytext=(6, 6),
                        color="tab:red", fontweight="bold")
