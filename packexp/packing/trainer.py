"""Trains one planned pack to a rung's epochs; splits it in two when it runs out of memory."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from packexp.packing.cache import PackCache
from packexp.packing.data import DeviceData
from packexp.packing.looped import uncounted
from packexp.packing.member import Member, MemberState
from packexp.packing.pack import Pack
from packexp.packing.runs import MemberResult, PackRun
from packexp.space import Trial
from packexp.space.options import PackSettings
from packexp.telemetry import PeakMemory

log = logging.getLogger(__name__)


def train_group(
    group: Sequence[Trial],
    cache: PackCache,
    epochs: float,
    states: Mapping[str, MemberState | None],
    splits: int = 0,
    fusion: str | None = None,
    lr_horizon: float | None = None,
) -> list[PackRun]:
    """Trains ``group`` as one pack until each member has ``epochs`` epochs in all.

    The pack comes from ``cache``: a kept pack of the same structure with the members'
    states loaded, or a new one. A pack that runs out of device memory is dropped, with
    every kept pack, and split in two halves, each started again from the members'
    ``states`` (untouched by the failed attempt), so no member is lost and none trains
    differently.

    Args:
        group: The planned pack.
        cache: Builds packs or hands out kept ones.
        epochs: Epochs each member has trained when the rung ends.
        states: Each trial's starting state; None (or absent) for a fresh trial.
        splits: How many times this group's ancestors were split (for the record).
        fusion: The pack's ``fusion`` setting; None for the cache's.
        lr_horizon: Epochs at which members' learning-rate schedules end; None for
            ``epochs`` (the rung's budget).

    Returns:
        The packs that ran: one, or more after splits.
    """
    pack = None
    started = time.perf_counter()
    try:
        with PeakMemory() as peak:
            taken = cache.members_reused
            pack, reused = cache.checkout(group, states, fusion)
            for m in pack.members:
                m.set_lr_horizon(epochs if lr_horizon is None else lr_horizon)
            built = time.perf_counter()
            stats = pack.train({m.trial_id: m.steps_for(epochs) - m.step for m in pack.members})
            t0 = time.perf_counter()
            evaluation = pack.evaluate()
            stats.trace_s += pack.eval_trace_s
            stats.eval_programs += pack.eval_trace_s > 0
            eval_s = time.perf_counter() - t0 - pack.eval_trace_s
            results = [MemberResult(m.trial, m.state(), m.failed, m.train_loss,
                                    mean_loss=m.mean_loss)
                       for m in pack.members if not m.idle]
            evaluation = {k: v for k, v in evaluation.items()
                          if any(r.trial_id == k for r in results)}
        cache.checkin(pack)
        return [PackRun(results, stats, evaluation, peak.growth_bytes, splits, reused,
                        reused_members=cache.members_reused - taken,
                        build_s=built - started, eval_s=eval_s, started=started,
                        peak_rss_bytes=peak.rss_bytes,
                        gpu_peak_bytes=peak.growth_bytes if peak.on_gpu else None)]
    except tf.errors.ResourceExhaustedError:
        if len(group) == 1:
            raise
        log.warning("pack of %d ran out of memory; splitting it in two and retrying",
                    len(group))
    pack = None
    cache.clear()  # kept packs hold device memory too
    gc.collect()
    half = len(group) // 2
    return [run
            for part in (group[:half], group[half:])
            for run in train_group(part, cache, epochs, states, splits + 1, fusion, lr_horizon)]


def probe_member(trial: Trial, make_member: Callable[[Trial], Member], data: DeviceData,
                 pack_options: Mapping[str, Any], steps: int = 3) -> int:
    """Peak memory growth, in bytes, of building ``trial``'s member and training it alone."""
    with PeakMemory() as peak, uncounted():
        member = make_member(trial)
        Pack([member], data, PackSettings.from_config(pack_options),
             pack_options.get("batch_bucket")).train({member.trial_id: steps})
    return peak.growth_bytes
