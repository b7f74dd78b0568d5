"""Calibration: step, set-up and evaluation times of a few packs, measured on this device.

``strategy=cost`` fits its cost model (``packexp/strategies/cost.py``) to these figures. A
calibration measures one member structure of the run's architecture (the search space's
first configuration) as a single at three batch sizes, and as plain and fused packs of a
few member counts. The packs are built through the run's ``PackCache``, which is cleared
afterwards: a plan must not depend on whether the calibration was measured in this process
or read back. Its compiled packs are shelved, out of every plan's sight, for the search's
first packs of their keys to train in (``PackCache.clear``); a looped program, kept by the
process, still serves the search.

It is kept per device and structure: in the run directory (a resumed run reads it back, so
it plans as the first session did) and under ``strategy.calibration_dir`` (packexp's home,
``$PACKEXP_HOME/calibration``, by default), where later runs on the same device, model, data
shape and pack settings find it, from whatever directory they run in.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packexp.packing.cache import PackCache
from packexp.packing.fused_graph import convolutional, couples_rows
from packexp.packing.member import write_state
from packexp.packing.program import MemberFacts
from packexp.packing.trainer import train_group
from packexp.space import Trial
from packexp.space.options import FUSED, PackSettings, choose_program, member_bucket
from packexp.strategies.calibration import (
    FALLBACK,
    LIMIT_S,
    CycleTiming,
    Measurement,
    PackTiming,
)

log = logging.getLogger(__name__)

VERSION = 7  # bumped whenever a record's fields change, or what it measures (7: jit_compile=auto
# leaves every convolution, 1-D and 3-D too, on oneDNN: a 1-D CNN kept under XLA re-measures)
TARGET_S = 0.05  # each timed chunk runs about this long
REPEATS = 3  # timed chunks per pack; the median counts
CYCLES = 5  # whole single packs timed as the search runs them (``pack_s``)
CNN_CYCLES, CNN_CYCLE_STEPS = 2, 12  # a CNN's cycles: fewer and shorter (its steps are slow)
# A first pack's set-up over a member's build: 13x for MobileNetV2 (20 s, 1.5 s), 18x mlp3
# (XLA), 21x the small cnn, on this 2-core CPU.
SETUP_PER_BUILD = 20


def calibrate(cache: PackCache, hparams: Mapping[str, Any], batch_sizes: Sequence[int],
              max_members: int, fits: Callable[[list[Trial]], bool],
              longest_steps: int, limit_s: float = LIMIT_S) -> dict:
    """Measures the packs a cost model is fitted to, for at most about ``limit_s`` seconds.

    Nothing new is measured once ``limit_s`` have passed (a pack under way finishes). A CNN
    measures its single, a pair and its other singles first, then larger packs, and fewer,
    shorter cycles. Where even a single and a pair did not fit in the time, the record is
    a fallback (``{"fallback": FALLBACK, "why": ...}``): the strategy plans as ``knn`` does,
    and the programs traced meanwhile serve its packs.

    Args:
        cache: The run's pack cache (its pack settings are the ones measured).
        hparams: One configuration of the search space: the member structure measured.
        batch_sizes: The batch sizes the search space holds.
        max_members: Most members per pack.
        fits: Whether a group of trials fits the device's capacity.
        longest_steps: Most steps a pack trains in one rung (whether XLA can come in).
        limit_s: Seconds after which nothing new is measured.
    """
    started = time.perf_counter()

    def spent() -> float:
        return time.perf_counter() - started

    low, high = min(batch_sizes), max(batch_sizes)
    middle = sorted(batch_sizes)[len(batch_sizes) // 2]
    count = iter(range(10**6))

    def trials(n: int, batch: int) -> list[Trial]:
        return [Trial(f"calibrate-{next(count)}", {**hparams, "batch_size": batch}, (),
                      seed=i + 1) for i in range(n)]

    probe = cache.make_member(trials(1, low)[0])
    cnn = convolutional(probe.model)
    pair = [probe, cache.make_member(trials(1, low)[0])]
    # The first pack traces (and compiles) the architecture's programs, in time that grows
    # with its graph as a build does: where that would take half the limit, leaving too
    # little for the single's steps and a pair, measure nothing.
    setup_s = SETUP_PER_BUILD * spent() / 2
    if setup_s > limit_s / 2:
        return fallback(f"a member took {spent() / 2:.1f} s to build, so its first pack's "
                        f"set-up would take about {setup_s:.0f} s, over half the "
                        f"{limit_s:g} s a calibration may take", spent())
    settings = PackSettings.from_config(cache.pack_options)
    facts = MemberFacts(pair, cache.data.head, cache.data.streams)
    fusable = choose_program(facts, settings, "on").kind == FUSED
    # Fused packs are measured where the run's pack.fusion fuses them: under auto not CNNs
    # on a CPU, whose fused packs stepped 2.1x slower than plain (docs/BENCHMARKS.md) and
    # took half of a MobileNetV2 calibration (50 of 108 s) to measure.
    fuse = fusable and choose_program(facts, settings).kind == FUSED
    if cache.bucketed:
        # One compiled program per member-count bucket, every batch padded to the bucket:
        # the single and the largest fused bucket, two points of a line in the member count
        # (``CostModel.fit``), each program kept for the search. A plain pack of several
        # compiles longest (one subgraph per member): measured only where packs cannot
        # fuse, and otherwise predicted as its members trained alone.
        largest = member_bucket(min(max_members, 8))
        specs = [("off", 1, high)]
        if fuse and largest > 1:
            specs += [("on", largest, high)]
        elif largest > 1:
            specs += [("off", largest, high)]
    else:
        counts = sorted({n for n in (2, 4, max_members) if 1 < n <= min(max_members, 4 if cnn
                                                                          else 8)})
        specs = [("off", 1, b) for b in dict.fromkeys((middle, low, high))]
        specs += [("off", n, b) for n in counts for b in (middle, high)]
        if fuse:
            specs += [("on", n, b) for n in counts for b in (middle, high)]
        if cnn:  # what a fit needs first: a single and a pair; its steps are slow
            specs.sort(key=lambda spec: (spec[1] > 2, spec[1] == 1 and spec[2] != middle))
    packs, cut = [], False
    member_s = 0.0  # a member's share of a measurement, per example of its batch, once known
    for fusion, n, batch in specs:
        group = trials(n, batch)
        if n > 1 and not fits(group):
            continue
        if spent() + member_s * n * batch > limit_s:  # it would end past the limit
            cut = True
            continue
        t0 = time.perf_counter()
        packs.append(_measure(cache, group, fusion))
        if not member_s:  # the first: a single, less its set-up (tracing, compiling)
            member_s = (time.perf_counter() - t0 - (packs[-1].setup_s or 0.0)) / batch
    if cut and not any(len(p.batches) > 1 for p in packs):
        return fallback(f"measuring {len(packs)} single{'' if len(packs) == 1 else 's'} took "
                        f"{spent():.1f} s, and a pack of two would take it past the "
                        f"{limit_s:g} s a calibration may take", spent())
    cycles = ([] if spent() > limit_s else
              _cycles(cache, trials(CNN_CYCLES, high), CNN_CYCLE_STEPS) if cnn
              else _cycles(cache, trials(CYCLES, high)))
    build_s, load_s = _member_times(cache, trials(1 if cnn else 3, middle))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i in range(3):
            write_state(probe.state(), Path(tmp) / f"m{i}")
        checkpoint_s = (time.perf_counter() - t0) / 3
    settings = {k: cache.pack_options[k] for k in ("fusion", "misaligned", "data_sharing",
                                                   "jit_compile")}
    # Plain packs of the architecture run looped: one program for every pack of it.
    settings["looped"] = any(p.looped for p in packs if p.fusion == "off")
    # Members whose batches are padded to the bucket step at its size, whatever their own.
    padded = cache.bucketed and not couples_rows(probe.model)
    settings["batch_bucket"] = cache.pack_options.get("batch_bucket") if padded else None
    return Measurement(tuple(packs), tuple(cycles), build_s, load_s, checkpoint_s,
                       cache.pack_options["chunk_steps"],
                       {**settings, "fusable": fusable, "bucketed": cache.bucketed},
                       round(time.perf_counter() - started, 3)).to_dict()


def fallback(why: str, seconds: float) -> dict:
    """The record of a calibration that does not fit in its time: the strategy plans as
    ``FALLBACK`` (``CostStrategy.prepare``) and says ``why``."""
    return {"fallback": FALLBACK, "seconds": round(seconds, 3), "why": why}


def _measure(cache: PackCache, group: list[Trial], fusion: str) -> PackTiming:
    """One pack as the search's engine runs it: its set-up (if new: tracing, and compiling
    where it compiles), median step time and evaluation time."""
    pack, reused = cache.checkout(group, {}, fusion)
    ids = [t.trial_id for t in group]
    first = pack.train(dict.fromkeys(ids, 3))
    setup = first.trace_s
    step = first.train_s / max(first.steps, 1)
    # A one-step chunk and a long one part a call's fixed cost from a step's (the widest
    # span: two close lengths gave slopes half the steps' time on a noisy machine).
    long = max(12, min(400, round(TARGET_S / max(step, 1e-6))))
    times = {k: statistics.median(pack.train(dict.fromkeys(ids, k)).train_s
                                  for _ in range(REPEATS)) for k in (1, long)}
    step_s = max(0.0, (times[long] - times[1]) / (long - 1))
    call_s = max(0.0, times[1] - step_s)
    evals = []
    for _ in range(3):
        t0 = time.perf_counter()
        pack.evaluate()
        evals.append(time.perf_counter() - t0 - pack.eval_trace_s)
        setup += pack.eval_trace_s
    setup += max(0.0, evals[0] - min(evals[1:]))  # a new evaluation's first call
    cache.checkin(pack)
    # A looped pack that traced nothing ran the architecture's program an earlier one traced.
    reused = reused or (first.looped and first.trace_s == 0)
    return PackTiming("on" if pack.fused else "off",
                      tuple(t.batch_size for t in group), step_s, call_s,
                      None if reused else setup, min(evals[1:]), (1, long), bool(first.xla),
                      bool(first.looped))


def _cycles(cache: PackCache, group: list[Trial], steps: int | None = None) -> list[CycleTiming]:
    """Fresh trials trained one epoch each (``steps``: about that many steps, where fewer)
    as singles, the way the search trains a pack (``train_group``: a kept pack checked out,
    trained, evaluated, its states taken and checked in), each timed whole: what a pack
    costs beyond its steps and evaluation."""
    out = []
    for trial in group:
        per_epoch = max(1, cache.data.train_size // trial.batch_size)
        epochs = 1.0 if steps is None else min(1.0, steps / per_epoch)
        [run] = train_group([trial], cache, epochs=epochs, states={}, fusion="off")
        out.append(CycleTiming((trial.batch_size,), (run.stats.steps,),
                               run.stats.trace_s > 0, time.perf_counter() - run.started))
    return out


def _member_times(cache: PackCache, group: list[Trial]) -> tuple[float, float]:
    """Seconds to build a member afresh, and to load a state into a built one."""
    t0 = time.perf_counter()
    members = [cache.make_member(t) for t in group]
    build_s = (time.perf_counter() - t0) / len(members)
    states = [m.state() for m in members]
    t0 = time.perf_counter()
    for m, t, s in zip(members, group, states[::-1], strict=True):
        m.load(t, s, m.preprocessing)
    load_s = (time.perf_counter() - t0) / len(members)
    return build_s, load_s


@dataclass(frozen=True)
class Fits:
    """Whether ``n`` members of one structure at batch size ``b`` fit: ``table[(n, b)]``."""

    table: Mapping[tuple[int, int], bool]

    def __call__(self, group: Sequence[Trial]) -> bool:
        return self.table[len(group), group[0].batch_size]


def calibration_args(hparams: Mapping[str, Any], batch_sizes: Sequence[int],
                     capacity: Any, max_members: int, longest_steps: int) -> tuple:
    """``calibrate_here``'s arguments, worked out where the search is planned: which of the
    packs a calibration may measure fit the device is answered here, by the memory model
    (``capacity``, a ``strategies.Capacity``)."""
    measured = (sorted(batch_sizes)[len(batch_sizes) // 2], max(batch_sizes))  # calibrate's
    fits = {(n, b): capacity.fits([Trial(f"fits-{i}", {**hparams, "batch_size": b}, (), seed=i)
                                   for i in range(n)])
            for n in range(2, min(max_members, 8) + 1) for b in dict.fromkeys(measured)}
    return (dict(hparams), list(batch_sizes), max_members, Fits(fits), longest_steps)


def calibrate_here(cache: Any, hparams: Mapping[str, Any], batch_sizes: Sequence[int],
                   max_members: int, fits: Fits, longest_steps: int) -> dict:
    """A calibration measured on this process's device (``Executor.on_device``)."""
    record = calibrate(cache, hparams, batch_sizes, max_members, fits, longest_steps)
    # The search starts from an empty cache, as it does on a calibration read back: what a
    # plan reuses must not depend on whether the calibration was measured in this process.
    # Its compiled packs are shelved, out of every plan's sight, for the search's first
    # packs of their keys to train in (PackCache.clear).
    cache.clear(shelve=True)
    return record
