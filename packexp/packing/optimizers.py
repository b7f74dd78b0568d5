"""Optimizers by the names the search spaces use, and their update in a step function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp import optim
from packexp.packing.schedules import BudgetSchedule, base_learning_rate
from packexp.space.options import OPTIMIZERS, lr_schedule_of, rule_for


@functools.cache
def optimizer_args(name: str) -> frozenset[str]:
    """The constructor arguments of optimizer ``name`` a search space may set (weight decay,
    momentum, beta values, ...): all of its Keras class's but the learning rate and name."""
    init = getattr(keras.optimizers, OPTIMIZERS[name].keras_class).__init__
    return frozenset(p for p in inspect.signature(init).parameters
                     if p not in ("self", "learning_rate", "name", "kwargs"))


# Most parameters a group of weights joins into one vector: a member's slots are kept, and
# its update runs, per group (``RuleOptimizer``). A bound keeps the update's temporaries
# small on large models; a weight larger than it is a group of its own.
JOIN_LIMIT = 1 << 20


def join_groups(sizes: Sequence[int], limit: int | None = None) -> list[list[int]]:
    """Consecutive indices of ``sizes`` in groups of at most ``limit`` (``JOIN_LIMIT``)
    elements each; a size over the limit alone."""
    limit = JOIN_LIMIT if limit is None else limit
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if not groups or total + n > limit:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


def general_update(g: tf.Tensor, m: tf.Tensor, v: tf.Tensor, c: Mapping[str, tf.Tensor],
                   lr: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``packexp.optim``'s general update: the weight's decrement and the new slots.

    ``c`` maps each coefficient name to a tensor that broadcasts against ``g`` (a scalar for
    one member, a ``[members, 1]`` column for a fused pack's rows); ``lr`` and ``step`` (the
    step about to be taken, from 1, float32) likewise. Plain and fused packs both call this,
    so every member's arithmetic is the same operations on its own numbers.
    """
    m = c["m_keep"] * m + (c["m_gain"] + c["m_gain_lr"] * lr) * (g - c["m_decay"] * m)
    v = c["v_keep"] * v + c["v_gain"] * (g * g - c["v_decay"] * v)
    alpha = (c["step_lr"] * ((lr * tf.sqrt(1.0 - tf.pow(c["beta_2"], step)))
                             / (1.0 - tf.pow(c["beta_1"], step))) + c["step_const"])
    return (m * alpha) / (tf.sqrt(v + c["eps_in"]) + c["eps_out"]), m * c["m_store"], v


class RuleOptimizer(keras.optimizers.Optimizer):
    """A member's optimizer of any ``packexp.optim`` rule: its rule is data.

    It keeps the rule's coefficients as a variable, so ``configure`` turns it into another
    rule, or the same with other options, without a new step function: kept packs serve
    trials of every rule. Its two slots (``_m``, ``_v``) are kept joined: one flat variable
    per group of weights (``join_groups``), so a step updates a group's slots in one
    operation each, whatever the number of weights in it. ``slot_values`` and
    ``set_slot_values`` read and write them weight by weight.
    """

    def __init__(self, rule: str, learning_rate: Any, options: Mapping[str, Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate=learning_rate, name=name or "rule_optimizer")
        self.rule = rule
        self.options = dict(options or {})

    def __getattr__(self, name: str) -> Any:
        """The rule's options read as Keras's optimizers read theirs (``beta_1``, ...)."""
        options = self.__dict__.get("options")
        if options is not None and name in options:
            return options[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def build(self, variables: Sequence[keras.Variable]) -> None:
        if self.built:
            return
        super().build(variables)
        # Initial values through initializers, never assignments after: Keras builds an
        # optimizer symbolically inside its compiled train step (``fit``), where assignments
        # are dropped (the coefficients stayed 0 and SGD divided by 0).
        coefficients = np.asarray(list(optim.coefficients(self.rule, self.options).values()),
                                  np.float32)
        v_start = optim.second_slot_start(self.rule, self.options)
        self.coefficients = self.add_variable(
            (len(optim.FIELDS),), initializer=keras.initializers.Constant(coefficients),
            name="coefficients")
        sizes = [int(np.prod(v.shape)) for v in variables]
        self._groups = join_groups(sizes)
        # Where weight i's slots sit: its group and its span in the group's vector.
        self._where: list[tuple[int, int, int]] = []
        for g, group in enumerate(self._groups):
            start = 0
            for i in group:
                self._where.append((g, start, sizes[i]))
                start += sizes[i]
        totals = [sum(sizes[i] for i in group) for group in self._groups]
        self._m = [self.add_variable((n,), name=f"m{g}") for g, n in enumerate(totals)]
        self._v = [self.add_variable((n,), initializer=keras.initializers.Constant(v_start),
                                     name=f"v{g}") for g, n in enumerate(totals)]

    def _slot(self, kind: str, i: int) -> tuple[keras.Variable, int, int]:
        g, start, size = self._where[i]
        return (self._m if kind == "m" else self._v)[g], start, size

    def slot_values(self, kind: str, variables: Sequence[keras.Variable]) -> list[np.ndarray]:
        """Slot ``kind`` (``"m"`` or ``"v"``) of each of ``variables``, shaped as it."""
        flats: dict[int, np.ndarray] = {}
        out = []
        for var in variables:
            slot, start, size = self._slot(kind, self._get_variable_index(var))
            if id(slot) not in flats:  # one read per group, not per weight
                flats[id(slot)] = slot.numpy()
            flat = flats[id(slot)]
            out.append(flat[start:start + size].reshape(var.shape))
        return out

    def set_slot_values(self, kind: str, variables: Sequence[keras.Variable],
                        values: Sequence[np.ndarray]) -> None:
        """Sets slot ``kind`` of each of ``variables`` to the matching array of ``values``."""
        flats: dict[int, tuple[keras.Variable, np.ndarray]] = {}
        for var, value in zip(variables, values, strict=True):
            slot, start, size = self._slot(kind, self._get_variable_index(var))
            if id(slot) not in flats:  # one read per group, not per weight
                flats[id(slot)] = (slot, slot.numpy().copy())
            flats[id(slot)][1][start:start + size] = np.reshape(value, -1)
        for slot, flat in flats.values():
            slot.assign(flat)

    def configure(self, rule: str, options: Mapping[str, Any], fresh: bool = False) -> None:
        """Makes this optimizer ``rule`` with ``options``; ``fresh`` also resets the slots."""
        self.rule, self.options = rule, dict(options)
        self.coefficients.assign(optim.coefficients(rule, options).values())
        if fresh:
            start = optim.second_slot_start(rule, options)
            for m, v in zip(self._m, self._v, strict=True):
                m.assign(tf.zeros_like(m))
                v.assign(tf.fill(v.shape, start))

    def fresh_slots(self, rule: str, options: Mapping[str, Any], learning_rate: float
                    ) -> tuple[np.ndarray, ...]:
        """The values of ``variables`` that a fresh optimizer of ``rule`` has, unbuilt."""
        start = optim.second_slot_start(rule, options)
        coefficients = np.asarray(optim.coefficients(rule, options).values(), np.float32)
        lr = base_learning_rate(self)
        out = []
        for var in self.variables:
            if var is self.coefficients:
                out.append(coefficients)
            elif var is lr:
                out.append(np.asarray(learning_rate, np.float32))
            elif any(var is v for v in self._v):
                out.append(np.full(var.shape, start, np.float32))
            else:  # iterations, the first slots and a schedule's horizon: as at the start
                out.append(np.ones(var.shape, var.dtype) if var.name == "lr_horizon"
                           else np.zeros(var.shape, var.dtype))
        return tuple(out)

    def coefficient_map(self) -> dict[str, tf.Tensor]:
        return dict(zip(optim.FIELDS, tf.unstack(self.coefficients.value), strict=True))

    def update_step(self, gradient, variable, learning_rate):
        """Keras's per-weight path (``optimizer.apply``); ``apply_gradients`` joins them."""
        i, dtype = self._get_variable_index(variable), variable.dtype
        coefficients = {k: tf.cast(c, dtype) for k, c in self.coefficient_map().items()}
        step = tf.cast(self.iterations + 1, dtype)
        (m_slot, start, size), (v_slot, _, _) = self._slot("m", i), self._slot("v", i)

        def read(slot):
            return tf.cast(tf.reshape(slot.value[start:start + size], variable.shape), dtype)

        delta, m, v = general_update(tf.cast(gradient, dtype), read(m_slot), read(v_slot),
                                     coefficients, tf.cast(learning_rate, dtype), step)
        for slot, value in ((m_slot, m), (v_slot, v)):
            slot.value[start:start + size].assign(tf.cast(tf.reshape(value, [-1]),
                                                          slot.dtype))
        self.assign_sub(variable, delta)

    def get_config(self) -> dict:
        return {**super().get_config(), "rule": self.rule, "options": self.options}


def rule_options(hparams: Mapping[str, Any]) -> tuple[str, dict[str, float]] | None:
    """The rule and options a trial's ``RuleOptimizer`` runs (``make_optimizer``'s); None
    when its optimizer is a Keras class's own."""
    name = hparams.get("optimizer")
    if name not in OPTIMIZERS:
        return None
    rule = rule_for(hparams, optimizer_args(name))
    if rule is None:
        return None
    given = {k: v for k, v in hparams.items() if k in optimizer_args(name)}
    return rule, optim.options_of(rule, {**OPTIMIZERS[name].options, **given})


def make_optimizer(name: str, learning_rate: float, hparams: Mapping[str, Any] | None = None,
                   horizon: int = 1) -> keras.optimizers.Optimizer:
    """Optimizer ``name`` at ``learning_rate``, with the trial's own arguments.

    A name with a rule in ``packexp.optim`` (and no option only Keras has) gives a
    ``RuleOptimizer``; every other name its Keras class.

    Args:
        name: A key of ``OPTIMIZERS``.
        learning_rate: The (base) learning rate, > 0.
        hparams: The trial's hyper-parameters. Those named as arguments of this optimizer
            (``optimizer_args``) are passed to it, over ``OPTIMIZERS``' defaults; others
            are not its business. ``lr_schedule`` (default ``constant``) makes the learning
            rate a ``BudgetSchedule``.
        horizon: The schedule's horizon in steps until ``schedules.set_horizon`` sets it.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer={name!r}: known optimizers are {list(OPTIMIZERS)}")
    if isinstance(learning_rate, bool) or not learning_rate > 0:
        raise ValueError(f"learning_rate={learning_rate!r}: must be > 0")
    hparams = hparams or {}
    spec = OPTIMIZERS[name]
    options = {**spec.options,
               **{k: v for k, v in hparams.items() if k in optimizer_args(name)}}
    schedule = lr_schedule_of(hparams)
    rate = (float(learning_rate) if schedule == "constant"
            else BudgetSchedule(schedule, learning_rate, horizon))
    ruled = rule_options({**hparams, "optimizer": name})
    try:
        if ruled is not None:
            optimizer = RuleOptimizer(ruled[0], rate, ruled[1])
        else:
            optimizer = getattr(keras.optimizers, spec.keras_class)(learning_rate=rate,
                                                                    **options)
    except (TypeError, ValueError, KeyError) as e:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(f"optimizer={name} ({given}): {e}") from None
    if not isinstance(rate, float):
        rate.track(optimizer)
    return optimizer


def optimizer_kind(optimizer: keras.optimizers.Optimizer) -> str | None:
    """The ``packexp.optim`` rule ``optimizer`` runs, or None when it is a Keras class's own."""
    return optimizer.rule if isinstance(optimizer, RuleOptimizer) else None


def group_rates(groups: Sequence[Sequence[int]], sizes: Sequence[int],
                rates: Sequence[tuple[float, float]] | None
                ) -> list[tuple[Any, Any] | None]:
    """A stand-in's learning-rate multipliers (``models.stand_in.StandIn.rates``: each
    weight's under an Adam-like rule and an SGD-like one) per group of joined weights: two
    numbers where the group's weights share them, two vectors of the group's length where they
    do not, None where every one is 1 (and for a model that is no stand-in)."""
    if rates is None:
        return [None] * len(groups)
    out: list[tuple[Any, Any] | None] = []
    for group in groups:
        pairs = [rates[i] for i in group]
        if all(p == (1.0, 1.0) for p in pairs):
            out.append(None)
        elif len(set(pairs)) == 1:
            out.append((np.float32(pairs[0][0]), np.float32(pairs[0][1])))
        else:
            out.append(tuple(np.concatenate([np.full(sizes[i], p[k], np.float32)
                                             for i, p in zip(group, pairs, strict=True)])
                             for k in (0, 1)))
    return out


def scaled_delta(delta: tf.Tensor, rates: tuple[Any, Any] | None,
                 coefficients: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """A group's decrement times its stand-in multipliers (``group_rates``): the Adam-like
    ones where the member's update is entrywise normalised (``Coefficients.normalised``),
    else the SGD-like ones. For every rule the update is linear in the learning rate, so
    this is muP's per-weight learning rate. ``delta`` as it is where ``rates`` is None."""
    if rates is None:
        return delta
    adaptive, sgd = (tf.constant(r) for r in rates)
    return delta * tf.where(coefficients["normalised"] > 0.0, adaptive, sgd)


def apply_gradients(optimizer: keras.optimizers.Optimizer, grads: Sequence[tf.Tensor],
                    variables: Sequence[keras.Variable],
                    rates: Sequence[tuple[float, float]] | None = None) -> None:
    """``optimizer.apply(grads, variables)`` in a few operations per step.

    A ``RuleOptimizer`` updates each group of weights at once: the group's gradients are
    flattened and joined, the general update runs once on them and its joined slots, and
    each weight takes its slice of the decrement. Elementwise arithmetic does not depend on
    the layout, so this is its per-weight ``update_step`` bit for bit, and every member of
    every plain pack and every member trained alone takes this path. Keras classes, and
    variables with constraints (Keras applies them), go through ``optimizer.apply``.
    ``rates``: a stand-in's multipliers (``group_rates``), which only the joined path applies.
    """
    if (not isinstance(optimizer, RuleOptimizer) or not variables
            or any(v.dtype != "float32" for v in variables) or any(g is None for g in grads)
            or any(v.constraint is not None for v in variables)):
        _per_weight(optimizer, grads, variables, rates)
        return
    if not optimizer.built:
        optimizer.build(variables)
    index = [optimizer._get_variable_index(v) for v in variables]
    if sorted(index) != list(range(len(optimizer._where))):  # not every weight: per weight
        _per_weight(optimizer, grads, variables, rates)
        return
    scaled = group_rates(optimizer._groups, [optimizer._where[i][2] for i in range(len(index))],
                         None if rates is None else [rates[index.index(i)]
                                                     for i in range(len(index))])
    by_index = dict(zip(index, zip(grads, variables, strict=True), strict=True))
    with tf.name_scope(optimizer.name):
        lr = tf.cast(tf.convert_to_tensor(optimizer.learning_rate), tf.float32)
        step = tf.cast(optimizer.iterations + 1, tf.float32)
        coefficients = optimizer.coefficient_map()
        for group, m_slot, v_slot, rated in zip(optimizer._groups, optimizer._m, optimizer._v,
                                                scaled, strict=True):
            pairs = [by_index[i] for i in group]
            g = (tf.reshape(pairs[0][0], [-1]) if len(pairs) == 1 else
                 tf.concat([tf.reshape(grad, [-1]) for grad, _ in pairs], axis=0))
            delta, m, v = general_update(g, m_slot.value, v_slot.value, coefficients, lr, step)
            delta = scaled_delta(delta, rated, coefficients)
            m_slot.value.assign(m)
            v_slot.value.assign(v)
            deltas = ([delta] if len(pairs) == 1 else
                      tf.split(delta, [optimizer._where[i][2] for i in group]))
            # The TensorFlow variables' own assignments: one operation each (Keras's
            # ``assign_sub`` reads, subtracts and assigns), the same arithmetic.
            for (_, var), d in zip(pairs, deltas, strict=True):
                var.value.assign_sub(tf.reshape(d, var.shape))
        optimizer.iterations.value.assign_add(1)


def _per_weight(optimizer: keras.optimizers.Optimizer, grads: Sequence[tf.Tensor],
                variables: Sequence[keras.Variable],
                rates: Sequence[tuple[float, float]] | None) -> None:
    """Keras's own ``optimizer.apply``, which has no per-weight rates: refused for a stand-in
    whose rates are not all 1."""
    if rates is not None and any(r != (1.0, 1.0) for r in rates):
        raise ValueError(f"surrogate.scale: optimizer {type(optimizer).__name__} of a stand-in "
                         "takes no per-weight learning rates; use one of packexp's update "
                         "rules (sgd, momentum, adagrad, adam) without Keras-only options")
    optimizer.apply(grads, variables)
