"""Trains one planned pack to a rung's epochs; splits it in two when it runs out of memory."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from packexp.packing.data import DeviceData
from packexp.packing.member import Member
from packexp.packing.pack import Evaluation, Pack, PackStats
from packexp.search_space import Trial
from packexp.telemetry import PeakMemory

log = logging.getLogger(__name__)


@dataclass
class PackRun:
    """One pack as it actually ran."""

    members: list[Member]
    stats: PackStats
    evaluation: dict[str, Evaluation]
    peak_memory_bytes: int
    splits: int = 0


def train_group(
    group: Sequence[Trial],
    make_member: Callable[[Trial], Member],
    data: DeviceData,
    epochs: float,
    pack_options: Mapping[str, Any],
    splits: int = 0,
) -> list[PackRun]:
    """Trains ``group`` as one pack until each member has ``epochs`` epochs in all.

    A pack that runs out of device memory is split in two halves, each rebuilt from the
    members' starting state (``make_member`` is deterministic) and retried, so no member is
    lost and none trains differently.

    Args:
        group: The planned pack.
        make_member: Builds a trial's member in its starting state.
        data: The shared device data.
        epochs: Epochs each member has trained when the rung ends.
        pack_options: Keyword arguments of ``Pack``.
        splits: How many times this group's ancestors were split (for the record).

    Returns:
        The packs that ran: one, or more after splits.
    """
    members: list[Member] = []
    pack = None
    try:
        with PeakMemory() as peak:
            members = [make_member(t) for t in group]
            pack = Pack(members, data, **pack_options)
            stats = pack.train({m.trial_id: m.steps_for(epochs) - m.step for m in members})
            evaluation = pack.evaluate()
        return [PackRun(members, stats, evaluation, peak.growth_bytes, splits)]
    except tf.errors.ResourceExhaustedError:
        if len(group) == 1:
            raise
        log.warning("pack of %d ran out of memory; splitting it in two and retrying",
                    len(group))
    members.clear()
    pack = None
    gc.collect()
    half = len(group) // 2
    return [run
            for part in (group[:half], group[half:])
            for run in train_group(part, make_member, data, epochs, pack_options, splits + 1)]


def probe_member(trial: Trial, make_member: Callable[[Trial], Member], data: DeviceData,
                 pack_options: Mapping[str, Any], steps: int = 3) -> int:
    """Peak memory growth, in bytes, of building ``trial``'s member and training it alone."""
    with PeakMemory() as peak:
        member = make_member(trial)
        Pack([member], data, **pack_options).train({member.trial_id: steps})
    return peak.growth_bytes
