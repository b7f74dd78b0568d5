"""Each member's bookkeeping after a chunk of steps; what a pack's training measured is typed
in ``runs.py`` (``PackStats``, ``Evaluation``), imported here for the programs."""

from __future__ import annotations

import logging
import math

import numpy as np

from packexp.packing.member import Member
from packexp.packing.runs import Evaluation, PackStats  # noqa: F401 (the programs' names)

log = logging.getLogger("packexp.packing.pack")


def account(group: list[Member], ks: list[int], mean_losses: np.ndarray,
            remaining: dict[str, int]) -> None:
    """Advances step counters after a chunk, adds its losses to each member's stretch
    (``Member.mean_loss``) and marks members whose loss diverged."""
    for m, k, loss in zip(group, ks, mean_losses, strict=True):
        if k == 0:
            continue
        m.step += k
        remaining[m.trial_id] -= k
        m.train_loss = float(loss)
        m.loss_sum += k * m.train_loss
        m.loss_steps += k
        if not math.isfinite(loss):
            m.failed = True
            log.info("member %s diverged (loss %s); it stops training", m.trial_id, loss)
