"""muP's rules ("Tensor Programs V"; the ``mup`` package's ``MuAdam``, ``MuSGD`` and
``MuReadout``), with the full model as the base shape: what a stand-in's weight takes, from its
shape and the full model's. Pure Python.

A dimension that differs between the two shapes is a *width* (muP's infinite dimension); its
multiplier is the stand-in's size over the full one's (``1/S`` for a stand-in S times narrower).
A weight with two widths is *hidden* (matrix-like), one width *vector-like* (an input layer's
kernel, the readout's, a bias, a normalisation's scale), none *fixed*. Keras orders a kernel's
axes input first (``[..., fan_in, fan_out]``): of a hidden weight's two widths the first is its
fan-in. At full width every multiplier is 1: the full model trains in its own parametrisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

HIDDEN, VECTOR, FIXED = "hidden", "vector", "fixed"


@dataclass(frozen=True)
class Role:
    """How one weight scales with width.

    Attributes:
        kind: ``hidden``, ``vector`` or ``fixed``.
        fan_in_mult: The stand-in's fan-in over the full model's (1 where it is fixed).
        fan_out_mult: The same of the fan-out.
        width_axis: A vector-like weight's width: ``out`` when it is its last axis (an
            input layer's kernel, a bias), ``in`` otherwise (the readout's kernel); None for
            the others.
    """

    kind: str
    fan_in_mult: float = 1.0
    fan_out_mult: float = 1.0
    width_axis: str | None = None

    @property
    def width_mult(self) -> float:
        """muP's ``width_mult``: the fan-in's multiplier where the fan-in is a width, else
        the fan-out's."""
        return self.fan_in_mult if self.fan_in_mult != 1.0 else self.fan_out_mult


def role(full: Sequence[int], stand_in: Sequence[int], name: str = "weight") -> Role:
    """The role of a weight of shape ``stand_in`` whose full model's is ``full``.

    Raises:
        ValueError: the shapes differ in rank, a dimension grew, or three differ (no muP rule).
    """
    full, stand_in = tuple(int(d) for d in full), tuple(int(d) for d in stand_in)
    if len(full) != len(stand_in):
        raise ValueError(f"{name}: shape {stand_in} of the stand-in against {full} at full "
                         "width: not the same weight")
    widths = [i for i, (f, s) in enumerate(zip(full, stand_in, strict=True)) if f != s]
    if any(stand_in[i] > full[i] for i in widths):
        raise ValueError(f"{name}: shape {stand_in} is wider than {full} at full width")
    mults = [stand_in[i] / full[i] for i in widths]
    if not widths:
        return Role(FIXED)
    if len(widths) == 1:
        last = widths[0] == len(full) - 1
        return (Role(VECTOR, fan_out_mult=mults[0], width_axis="out") if last else
                Role(VECTOR, fan_in_mult=mults[0], width_axis="in"))
    if len(widths) == 2:
        return Role(HIDDEN, fan_in_mult=mults[0], fan_out_mult=mults[1])
    raise ValueError(f"{name}: {len(widths)} of its dimensions scale with width "
                     f"({stand_in} against {full}); muP has rules for two at most")


def adaptive_rate(r: Role) -> float:
    """The learning-rate multiplier under an Adam-like rule (entrywise normalised: Adam, and
    Adagrad from an accumulator at zero): ``MuAdam`` divides a hidden weight's by its
    fan-in's multiplier, and keeps the others'."""
    return 1.0 / r.fan_in_mult if r.kind == HIDDEN else 1.0


def sgd_rate(r: Role) -> float:
    """The learning-rate multiplier under an SGD-like rule (SGD, momentum, and Adagrad from
    Keras's accumulator of 0.1, ``optim.coefficients``): ``MuSGD``
    multiplies a vector-like weight's by its width's multiplier and a hidden weight's by its
    fan-out's over its fan-in's."""
    if r.kind == VECTOR:
        return r.width_mult
    if r.kind == HIDDEN:
        return r.fan_out_mult / r.fan_in_mult
    return 1.0


def readout_multiplier(r: Role) -> float:
    """What the readout's input is multiplied by (``MuReadout``'s ``1 / width_mult``)."""
    return 1.0 / r.width_mult


def fans(shape: Sequence[int]) -> tuple[float, float]:
    """Keras's ``compute_fans``: a kernel's fan-in and fan-out, a convolution's receptive
    field counted in both."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


def init_factor(full: Sequence[int], stand_in: Sequence[int], r: Role, mode: str) -> float:
    """What a stand-in's kernel drawn by a variance-scaling initialiser (Keras's Glorot, He,
    LeCun: variance ``scale / fan``, ``mode`` one of ``fan_in``, ``fan_out``, ``fan_avg``) is
    multiplied by to start as muP has it with the full model as base: a hidden weight's
    variance the full model's over its fan-in's multiplier (``1 / fan_in``, muP's and
    Glorot's own for a square layer), every other kernel's the full model's (constant in
    width; for the readout that is ``MuReadout``'s ``sqrt(width_mult)`` rescaling)."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"mode={mode!r}: must be fan_in, fan_out or fan_avg")

    def variance(shape: Sequence[int]) -> float:
        fan_in, fan_out = fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        return 1.0 / fan

    target = variance(full) / (r.fan_in_mult if r.kind == HIDDEN else 1.0)
    return math.sqrt(target / variance(stand_in))


def narrowed(width: int, scale: int) -> int:
    """A width divided by ``scale``, rounded, at least 1."""
    return max(1, round(width / scale))
