"""What a pack's training measured, and each member's bookkeeping after a chunk of steps."""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from packexp.packing.member import Member

log = logging.getLogger("packexp.packing.pack")


@dataclass
class PackStats:
    """What one ``Pack.train`` call measured."""

    members: int
    fused: bool = False
    looped: bool = False  # one program looping over the members (``packing.looped``)
    xla: bool = False
    grouped_conv: str | None = None  # fused packs with grouped convolutions: native or split
    steps: int = 0
    train_s: float = 0.0
    read_s: float = 0.0  # waiting for a stream's blocks (``data.streamed``), not in train_s
    trace_s: float = 0.0  # step functions traced or compiled (and warmed up) for this call
    programs: int = 0  # step programs traced (and compiled, under XLA) for this call
    eval_programs: int = 0  # evaluation programs traced (counted by the trainer)
    switches: int = 0
    switch_overhead_s: float = 0.0
    chunk_step_ms: list[float] = field(default_factory=list)
    group: tuple | None = field(default=None, repr=False)  # the step function last run

    @property
    def step_time_ms(self) -> float | None:
        """Median time of one pack step over the chunks run."""
        return statistics.median(self.chunk_step_ms) if self.chunk_step_ms else None


@dataclass(frozen=True)
class Evaluation:
    """A member's validation metrics: a classification's accuracy and cross-entropy, or a
    regression's mean squared error (``val_loss`` too), mean absolute error and R²; None
    where the member failed or the metric is not its problem's."""

    val_accuracy: float | None
    val_loss: float | None
    val_mse: float | None = None
    val_mae: float | None = None
    val_r2: float | None = None
    params: int | None = None  # the member's parameter count
    flops: int | None = None  # its FLOPs per example (``models.flops``)
    extra: dict[str, float] | None = None  # the model's own metrics (``model.metrics``)


def account(group: list[Member], ks: list[int], mean_losses: np.ndarray,
            remaining: dict[str, int]) -> None:
    """Advances step counters after a chunk and marks members whose loss diverged."""
    for m, k, loss in zip(group, ks, mean_losses, strict=True):
        if k == 0:
            continue
        m.step += k
        remaining[m.trial_id] -= k
        m.train_loss = float(loss)
        if not math.isfinite(loss):
            m.failed = True
            log.info("member %s diverged (loss %s); it stops training", m.trial_id, loss)
