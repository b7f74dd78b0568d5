"""The cost model: a device's pack durations, in seconds, fitted to its calibration
(``CostModel``), and a calibration record read as one (``fitted``). Pure arithmetic;
``strategies/cost.py`` plans with it."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packexp.space import Trial
from packexp.space.options import (
    PACK_DEFAULTS,
    Facts,
    PackSettings,
    fusion_modes,
    member_bucket,
    why_not_fusable,
)
from packexp.strategies.calibration import (
    FALLBACK,
    Measurement,
    PackTiming,
)


def _fit(rows: list[list[float]], targets: list[float], width: int) -> tuple[float, ...]:
    """Non-negative least squares: every coefficient is a time, never below zero."""
    if not rows:
        return (0.0,) * width
    from scipy.optimize import nnls  # here: before TensorFlow, 0.47 CPU-s more (BENCHMARKS)
    coefficients, _ = nnls(np.asarray(rows, float), np.asarray(targets, float))
    return tuple(float(c) for c in coefficients)


@dataclass(frozen=True)
class CostModel:
    """A device's pack durations, in seconds, fitted to its calibration. Pure arithmetic.

    Attributes:
        plain: ``(a, c0, c1)``: a plain pack's step takes ``a + sum(c0 + c1 * batch)`` over
            the members still training.
        fused: ``(a, f0, f1)``: a fused pack's step takes ``a + n * (f0 + f1 * max batch)``;
            None where the architecture does not fuse here.
        plain_setup, fused_setup: ``(s0, s1)``: setting up a new pack's programs (tracing
            its step and evaluation functions, and compiling the step where it compiles),
            n members: ``s0 + s1 * n``. Paid once per program: later packs of its key reuse
            it. Where plain packs run looped (``settings["looped"]``), one program serves
            every plain pack of a member structure, whatever its size: ``s1`` is 0 and the
            set-up is paid by the structure's first plain pack alone.
        evaluate: ``(e0, e1)``: one evaluation of a pack of n: ``e0 + e1 * n``.
        call_s: The fixed cost of one call of the step function (one chunk of steps).
        build_s: A member built afresh (or, once per member structure, to confirm that its
            initial weights replay exactly).
        load_s: A state loaded into a built member.
        pack_s: A kept single's whole pack beyond its steps and evaluation, as the search
            runs it (its state loaded, horizons set, its state taken and checked in),
            fitted to the calibration's timed cycles; a pack of n adds ``load_s`` for each
            further member.
        checkpoint_s: A member's state copied and written.
        settings: The pack settings the calibration ran under.
        error: Relative error of the fitted step times over the calibration's packs.
    """

    plain: tuple[float, float, float]
    fused: tuple[float, float, float] | None
    plain_setup: tuple[float, float]
    fused_setup: tuple[float, float] | None
    evaluate: tuple[float, float]
    call_s: float
    build_s: float
    load_s: float
    checkpoint_s: float
    pack_s: float | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def fit(cls, calibration: Mapping[str, Any] | Measurement) -> CostModel:
        """Fits the model to a calibration (``packing.calibrate.calibrate``'s record)."""
        measured = (calibration if isinstance(calibration, Measurement)
                    else Measurement.from_dict(calibration))
        rows = measured.packs
        plain = [r for r in rows if r.fusion == "off"]
        fused = [r for r in rows if r.fusion == "on"]
        if not plain:
            raise ValueError("calibration: no plain pack measured")
        bucketed = bool(measured.settings.get("bucketed"))

        def n(r: PackTiming) -> int:  # a compiled fused program computes its idle seats too
            count = len(r.batches)
            return member_bucket(count) if bucketed and r.fusion == "on" else count

        if len({n(r) for r in plain}) > 1:
            plain_step = _fit([[1, n(r), sum(r.batches)] for r in plain],
                              [r.step_s for r in plain], 3)
        else:  # singles only: a plain pack costs its members alone, and no less
            plain_step = (0.0, *_fit([[n(r), sum(r.batches)] for r in plain],
                                     [r.step_s for r in plain], 2))
        if bucketed and len({n(r) for r in fused}) == 1:
            # One fused bucket measured (the largest): the single is the line's other end,
            # a compiled program of one member (measured: a fused pack of 2 within 10% of
            # the line through them).
            fused = fused + [r for r in plain if n(r) == 1]
        fused_step = (_fit([[1, n(r), n(r) * max(r.batches)] for r in fused],
                           [r.step_s for r in fused], 3) if fused else None)

        def setup(group: list[PackTiming]) -> tuple[float, ...]:
            timed = [r for r in group if r.setup_s is not None]
            return _fit([[1, n(r)] for r in timed], [r.setup_s for r in timed], 2)

        looped = bool(measured.settings.get("looped"))
        traced = [r.setup_s for r in plain if r.setup_s is not None]

        model = cls(
            plain=plain_step, fused=fused_step,
            plain_setup=(max(traced, default=0.0), 0.0) if looped else setup(plain),
            fused_setup=setup(fused) if fused else None,
            evaluate=_fit([[1, n(r)] for r in rows], [r.eval_s for r in rows], 2),
            call_s=statistics.median(r.call_s for r in rows),
            build_s=measured.build_s, load_s=measured.load_s,
            checkpoint_s=measured.checkpoint_s,
            settings={**measured.settings, "chunk_steps": measured.chunk_steps})
        cycles = [c for c in measured.cycles if not c.traced]
        if cycles:  # the rest of a measured single's time: one load and the bookkeeping
            e0, e1 = model.evaluate
            rest = [c.duration_s - model.train_s(c.batches, c.steps, "off") - e0 - e1
                    for c in cycles]
            pack_s = max(statistics.median(rest), model.load_s)
            model = cls(**{**model.__dict__, "pack_s": pack_s})
        errors = [abs(model.step_s(r.batches, r.fusion) - r.step_s) / r.step_s
                  for r in rows if r.step_s > 0]
        error = {"median": statistics.median(errors), "max": max(errors), "packs": len(errors)}
        return cls(**{**model.__dict__, "error": error})

    @property
    def sliced(self) -> bool:
        return self.settings.get("data_sharing") == "slice"

    def modes(self, group: Sequence[Trial]) -> tuple[str, ...]:
        """Fusion settings a pack of ``group`` may take (``fusion_modes``): fused where a fused
        pack was measured and every member has a fused update rule (``why_not_fusable``)."""
        unfusable = next((why for t in group if (why := why_not_fusable(t.hparams))),
                         None if self.fused else "no fused pack was measured on this device")
        return fusion_modes(Facts(len(group), unfusable=unfusable), PackSettings(
            **{k: v for k, v in self.settings.items() if k in ("fusion", "data_sharing")}))

    @property
    def bucketed(self) -> bool:
        return bool(self.settings.get("bucketed"))

    @property
    def looped(self) -> bool:
        """Whether plain packs of one member structure share one looped program."""
        return bool(self.settings.get("looped"))

    def padded(self, batches: Sequence[int]) -> list[int]:
        """The batch sizes members step at: the bucket where the search pads their rows."""
        bucket = self.settings.get("batch_bucket")
        return [max(b, bucket) for b in batches] if bucket else list(batches)

    def step_s(self, batches: Sequence[int], fusion: str) -> float:
        """One step of a pack whose members all train, with these batch sizes (as the
        calibration ran them: compiled, and padded to the bucket, where the search is)."""
        batches = self.padded(batches)
        if fusion == "on" and self.fused is not None:
            a, f0, f1 = self.fused
            n = member_bucket(len(batches)) if self.bucketed else len(batches)
            return a + n * (f0 + f1 * max(batches))
        a, c0, c1 = self.plain
        return a + sum(c0 + c1 * b for b in batches)

    def setup_s(self, members: int, fusion: str) -> float:
        """Setting up a new pack's programs (traced, and compiled where they compile)."""
        s0, s1 = (self.fused_setup if fusion == "on" and self.fused_setup
                  else self.plain_setup)
        if self.bucketed:
            members = member_bucket(members)
        return s0 + s1 * members

    def train_s(self, batches: Sequence[int], steps: Sequence[int], fusion: str) -> float:
        """Training members with these batch sizes for their own numbers of steps.

        A fused pack runs every member (padded to the largest batch) for the most steps;
        a plain pack skips a member's step once its budget is spent.
        """
        longest = max(steps)
        chunk = int(self.settings.get("chunk_steps", PACK_DEFAULTS.chunk_steps))
        calls = -(-longest // chunk) * self.call_s
        if fusion == "on" and self.fused is not None:
            return calls + longest * self.step_s(batches, "on")
        a, c0, c1 = self.plain
        total = a * longest + sum(s * (c0 + c1 * b) for b, s in zip(self.padded(batches),
                                                                     steps, strict=True))
        if self.settings.get("misaligned") == "switch":  # a re-trace per member that leaves
            total += sum(self.setup_s(k, "off") for k in range(1, len(set(steps))))
        return calls + total

    def duration_s(self, batches: Sequence[int], steps: Sequence[int], fusion: str, *,
                   new: bool, builds: int, checkpoint: bool = True) -> float:
        """A pack's predicted ``duration_s``: set-up, training, evaluation and checkpoints.

        Args:
            batches, steps: Each member's batch size and steps this rung.
            fusion: ``on`` (fused) or ``off`` (plain).
            new: Whether its step functions are traced (no kept pack of its structure).
            builds: Members built afresh; the others have a state loaded.
            checkpoint: Whether members write checkpoints after it.
        """
        n = len(batches)
        e0, e1 = self.evaluate
        loads = (n - builds) * self.load_s
        if self.pack_s is not None:  # measured whole: one load and a pack's bookkeeping
            loads += self.pack_s - self.load_s
        return (builds * self.build_s + loads
                + (self.setup_s(n, fusion) if new else 0.0)
                + self.train_s(batches, steps, fusion) + e0 + e1 * n
                + (n * self.checkpoint_s if checkpoint else 0.0))


def fitted(record: Mapping[str, Any]) -> CostModel | None:
    """A calibration record's cost model; None for a fallback record (no calibration fitted
    in ``LIMIT_S``), whose ``why`` must say why. Raises where it is neither."""
    if "fallback" not in record:
        return CostModel.fit(record)
    if record["fallback"] != FALLBACK or not isinstance(record.get("why"), str):
        raise ValueError(f"fallback={record['fallback']!r}: not {FALLBACK!r} with a why")
    return None
