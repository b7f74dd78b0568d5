"""Ts(Seq) against Ts(Pack): packs built once per XLA setting, timed in a balanced order."""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from packexp.errors import ConfigError
from packexp.packing import DeviceData, Member, Pack
from packexp.space.options import PackSettings

log = logging.getLogger(__name__)


def impv(ts_seq: float, ts_pack: float) -> float:
    """The paper's IMPV = (Ts(Seq) - Ts(Pack)) / Ts(Seq)."""
    return (ts_seq - ts_pack) / ts_seq


def xla_label(settings: set[bool]) -> str:
    if len(settings) == 1:
        return "on" if next(iter(settings)) else "off"
    return "mixed"


class PackTimer:
    """Builds, warms up and times packs, each compiled once per key and XLA setting.

    Args:
        options: ``Pack`` keyword arguments (the configured ``cfg.pack``).
        steps: Steps per timed chunk.
        warmup_steps: Steps run once after compiling, untimed.
    """

    def __init__(self, options: Mapping[str, Any], steps: int, warmup_steps: int) -> None:
        self.options = dict(options)
        self.steps = steps
        self.warmup_steps = warmup_steps
        self._packs: dict[tuple[Hashable, bool], Pack | None] = {}

    def prepare(self, key: Hashable, members: Sequence[Member], data: DeviceData, xla: bool,
                **overrides: Any) -> Pack | None:
        """The warmed-up pack of ``members``; None when XLA cannot compile it."""
        if (key, xla) not in self._packs:
            options = {**self.options, **overrides, "jit_compile": xla,
                       "chunk_steps": self.steps}
            pack = Pack(list(members), data, PackSettings.from_config(options))
            try:
                if self.warmup_steps:
                    pack.train({m.trial_id: self.warmup_steps for m in members})
                else:  # still compile, outside any timing
                    pack.train({m.trial_id: 1 for m in members})
            except tf.errors.ResourceExhaustedError:
                raise
            except tf.errors.OpError as e:
                if not xla:
                    raise
                log.info("XLA cannot compile pack %s (%s); timing it without XLA only", key,
                         str(e).splitlines()[0][:120])
                pack = None
            self._packs[(key, xla)] = pack
        return self._packs[(key, xla)]

    def time_ms(self, pack: Pack) -> float:
        """Median step time of one chunk of ``steps`` steps of every member."""
        stats = pack.train({m.trial_id: self.steps for m in pack.members})
        return float(stats.step_time_ms)

    def is_fused(self, key: Hashable) -> bool:
        return any(bool(getattr(p, "fused", False))
                   for (k, _), p in self._packs.items() if k == key and p is not None)

    def drop(self, key: Hashable | None = None) -> None:
        """Forgets the packs of ``key`` (all packs when None), freeing their step functions."""
        for k in [k for k in self._packs if key is None or k[0] == key]:
            del self._packs[k]


def balanced(arms: Sequence[Any], repeats: int) -> list[list[Any]]:
    """The order to time ``arms`` in, repeat by repeat: ABBA.

    Odd repeats run the arms in reverse, and an odd ``repeats`` is rounded up to even, so
    every arm runs first as often as last and a drift in the machine's speed (a warming
    cache, a neighbour's job starting) weighs on every arm alike.
    """
    arms = list(arms)
    return [arms if r % 2 == 0 else arms[::-1] for r in range(repeats + repeats % 2)]


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The smallest and largest of ``values``: the range the median is reported with."""
    return (min(values), max(values))


@dataclass(frozen=True)
class Comparison:
    """Ts(Seq) and Ts(Pack) of one set of members, each the faster of the XLA settings.

    ``impv`` is the median over repeats of each repeat's paired IMPV (the same repeat's
    singles against its pack), ``impv_low`` and ``impv_high`` their range: a difference
    inside it is noise.
    """

    ts_seq_ms: float
    ts_pack_ms: float
    seq_xla: str
    pack_xla: str
    fused: bool = False
    impvs: tuple[float, ...] = ()

    @property
    def impv(self) -> float:
        if self.impvs:
            return statistics.median(self.impvs)
        return impv(self.ts_seq_ms, self.ts_pack_ms)

    @property
    def impv_low(self) -> float:
        return spread(self.impvs)[0] if self.impvs else self.impv

    @property
    def impv_high(self) -> float:
        return spread(self.impvs)[1] if self.impvs else self.impv

    def row(self) -> dict[str, Any]:
        return {"ts_seq_ms": self.ts_seq_ms, "ts_pack_ms": self.ts_pack_ms, "impv": self.impv,
                "impv_low": self.impv_low, "impv_high": self.impv_high,
                "repeats": len(self.impvs), "seq_xla": self.seq_xla,
                "pack_xla": self.pack_xla, "fused": self.fused}


def compare(timer: PackTimer, members: Sequence[Member], data: DeviceData, *,
            repeats: int, xla: Sequence[bool], pack_key: Hashable,
            single_keys: Sequence[Hashable] | None = None, **overrides: Any) -> Comparison:
    """Times each member alone and all of them packed, in a balanced order (``balanced``).

    Every arm (each single and the pack, under each XLA setting) is built and warmed up
    before any is timed. Ts(Seq) is never handicapped: each member trains alone in its own
    pack, with the faster of the XLA settings for that member. Members with equal
    ``single_keys`` (identical architecture and hyper-parameters) share one single-member
    measurement.

    Args:
        timer: Builds and times the packs.
        members: The pack's members.
        data: The device data they train on.
        repeats: Timed chunks per arm, rounded up to even; each figure is their median.
        xla: XLA settings to try.
        pack_key: Cache key of the pack in ``timer``.
        single_keys: Cache key of each member's single-member pack; the trial ids if None.
        **overrides: ``Pack`` options for these packs (and their singles).

    Returns:
        The comparison, with the range of the repeats' paired IMPVs.
    """
    keys = list(single_keys) if single_keys is not None else [m.trial_id for m in members]
    firsts: dict[Hashable, Member] = {}
    for key, member in zip(keys, members, strict=True):
        firsts.setdefault(key, member)
    arms: list[tuple[Hashable, bool, Pack]] = []
    for x in xla:
        for key, member in firsts.items():
            pack = timer.prepare(("single", key), [member], data, x, **overrides)
            if pack is not None:
                arms.append((("single", key), x, pack))
        pack = timer.prepare(pack_key, members, data, x, **overrides)
        if pack is not None:
            arms.append((pack_key, x, pack))
    times: dict[tuple[Hashable, bool], list[float]] = defaultdict(list)
    for order in balanced(arms, repeats):
        for key, x, pack in order:
            times[(key, x)].append(timer.time_ms(pack))
    packed = {x: times[(pack_key, x)] for x in xla if times[(pack_key, x)]}
    if not packed or any(not any(times[(("single", k), x)] for x in xla) for k in firsts):
        raise ConfigError(f"profile.xla={list(xla)}: XLA cannot compile pack {pack_key} (see "
                          "the log); add false")
    best_single: dict[Hashable, tuple[float, bool]] = {}
    for key in firsts:
        best_single[key] = min((statistics.median(times[(("single", key), x)]), x)
                               for x in xla if times[(("single", key), x)])
    ts_seq = sum(best_single[key][0] for key in keys)
    ts_pack, pack_x = min((statistics.median(v), x) for x, v in packed.items())
    seq_by_repeat = [sum(times[(("single", k), best_single[k][1])][r] for k in keys)
                     for r in range(len(packed[pack_x]))]
    impvs = tuple(impv(s, p) for s, p in zip(seq_by_repeat, packed[pack_x], strict=True))
    return Comparison(ts_seq, ts_pack, xla_label({best_single[k][1] for k in firsts}),
                      xla_label({pack_x}), timer.is_fused(pack_key), impvs)
