"""Start-up, phase by phase: where a job's seconds go between the command and its first pack.

The command's steps call ``mark(phase)`` as each phase ends; ``phases`` splits a job's
``startup_s`` (``results.json``) into them, so that the parts add up to the whole. A phase
marked twice (the data: loaded, then put on the device) counts both spans.
"""

from __future__ import annotations

import time

# The phases in the order a command meets them, with what each holds (docs/tracking.md).
PHASES = {
    "python": "the interpreter and packexp's first modules",
    "imports": "Hydra, OmegaConf and the command's modules",
    "composition": "Hydra composing the config, the checks, the run directory",
    "tensorflow": "importing TensorFlow and finding its devices",
    "data": "loading the dataset and putting it where packs read it",
    "model": "building the model once per hyper-parameter value to check it",
    "executor": "starting the executor and asking the device's facts",
    "tracker": "opening the journal and starting the tracker (the MLflow writer)",
    "capacity": "the device's memory limit and the memory estimate",
    "calibration": "the strategy's calibration (strategy=cost), measured or read back",
    "planning": "drawing the first rung and planning and probing its packs",
}

_marks: list[tuple[str, float]] = []


def mark(phase: str) -> None:
    """Ends ``phase`` now: its span runs from the mark before."""
    if phase not in PHASES:
        raise ValueError(f"unknown start-up phase {phase!r}")
    _marks.append((phase, time.time()))


def phases(started: float, first_pack_at: float) -> dict[str, float]:
    """Seconds per phase between ``started`` (the job's clock, ``session.command_started``)
    and ``first_pack_at``, in ``PHASES`` order; what follows the last mark is ``planning``.
    Marks before ``started`` (an earlier job of the same process) are not this job's."""
    spent: dict[str, float] = {}
    before = started
    for phase, at in _marks:
        if started <= at <= first_pack_at:
            spent[phase] = spent.get(phase, 0.0) + at - before
            before = at
    spent["planning"] = spent.get("planning", 0.0) + first_pack_at - before
    return {p: round(spent[p], 3) for p in PHASES if p in spent}
