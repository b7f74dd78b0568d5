"""Optimizer update rules as data: one module per rule, each a set of coefficients of one
general update, so plain and fused packs run every rule with the same program.

The general update of a weight ``w`` with gradient ``g``, first slot ``m``, second slot
``v``, learning rate ``lr`` and step ``t`` (counting from 1):

    m' = m_keep * m + (m_gain + m_gain_lr * lr) * (g - m_decay * m)
    v' = v_keep * v + v_gain * (g * g - v_decay * v)
    alpha = step_lr * (lr * sqrt(1 - beta_2 ** t)) / (1 - beta_1 ** t) + step_const
    w' = w - (m' * alpha) / (sqrt(v' + eps_in) + eps_out)

and the first slot keeps ``m' * m_store``: a rule that keeps no first moment (SGD, where
``m'`` is the gradient itself) leaves its slot at zero.

A rule's coefficients reproduce its Keras optimizer's own arithmetic, operation for
operation, wherever a coefficient is 0 or 1 (``x * 1``, ``x + 0`` and ``0 * x`` are exact),
so SGD, momentum, Adagrad and Adam agree with Keras bit for bit. A rule is a module of this
package with ``KERAS_CLASS``, ``DEFAULTS`` (its options and their defaults), ``V_INIT`` (the
second slot's starting value) and ``coefficients(**options)``; nothing else is edited to add
one. This package is pure Python: the config checks and the cost model read it without
TensorFlow.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import astuple, dataclass, fields, replace
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Coefficients:
    """One rule's coefficients of the general update (see the module docstring)."""

    m_keep: float = 0.0
    m_gain: float = 1.0
    m_gain_lr: float = 0.0
    m_decay: float = 0.0
    m_store: float = 0.0
    v_keep: float = 0.0
    v_gain: float = 0.0
    v_decay: float = 0.0
    beta_1: float = 0.0
    beta_2: float = 0.0
    step_lr: float = 1.0
    step_const: float = 0.0
    eps_in: float = 1.0
    eps_out: float = 0.0
    # Not in the update: 1 where it is entrywise normalised from the first step (a second
    # moment that starts at zero: Adam), which muP's Adam-like rules are for; 0 where it is
    # SGD-like (``coefficients`` sets it; a stand-in's per-weight rates read it).
    normalised: float = 0.0

    def values(self) -> tuple[float, ...]:
        return astuple(self)


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Coefficients))


def _discover() -> dict[str, ModuleType]:
    return {info.name: importlib.import_module(f"{__name__}.{info.name}")
            for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")}


#: Rule name (the search space's optimizer name) -> its module.
RULES: dict[str, ModuleType] = _discover()


def options_of(rule: str, hparams: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The rule's options: its defaults, overridden by those ``hparams`` name."""
    defaults = RULES[rule].DEFAULTS
    hparams = hparams or {}
    return {k: float(hparams.get(k, v)) for k, v in defaults.items()}


def coefficients(rule: str, hparams: Mapping[str, Any] | None = None) -> Coefficients:
    """The coefficients of ``rule`` with the trial's options (``options_of``).

    ``normalised`` is 1 where the rule keeps a second moment that starts at zero. Adagrad's
    accumulator starts at Keras's 0.1: while the squared gradients summed stay below it, as
    a wide layer's small gradients do, its update is SGD's times ``1/sqrt(0.1)``, and
    muP's SGD-like rules transfer it (measured, docs/stand-ins.md)."""
    out = RULES[rule].coefficients(**options_of(rule, hparams))
    return replace(out, normalised=float(out.v_gain > 0
                                         and second_slot_start(rule, hparams) == 0.0))


def second_slot_start(rule: str, hparams: Mapping[str, Any] | None = None) -> float:
    """Where the rule's second slot starts: ``V_INIT``, a number or the option holding it."""
    start = RULES[rule].V_INIT
    return options_of(rule, hparams)[start] if isinstance(start, str) else float(start)
