"""Keras optimizers by the names the search spaces use, and their update in a step function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from packexp.pack_options import EXTRAS, OPTIMIZERS
from packexp.packing.schedules import BudgetSchedule

# Classes whose update_step apply_gradients reproduces (a subclass may override it).
_EXACT = (keras.optimizers.Adam, keras.optimizers.SGD, keras.optimizers.Adagrad)


@functools.cache
def optimizer_args(name: str) -> frozenset[str]:
    """The constructor arguments of optimizer ``name`` a search space may set (weight decay,
    momentum, beta values, ...): all of its Keras class's but the learning rate and name."""
    init = getattr(keras.optimizers, OPTIMIZERS[name].keras_class).__init__
    return frozenset(p for p in inspect.signature(init).parameters
                     if p not in ("self", "learning_rate", "name", "kwargs"))


def make_optimizer(name: str, learning_rate: float, hparams: Mapping[str, Any] | None = None,
                   horizon: int = 1) -> keras.optimizers.Optimizer:
    """Optimizer ``name`` at ``learning_rate``, with the trial's own arguments.

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
    schedule = hparams.get("lr_schedule", "constant")
    rate = (float(learning_rate) if schedule == "constant"
            else BudgetSchedule(schedule, learning_rate, horizon))
    try:
        optimizer = getattr(keras.optimizers, spec.keras_class)(learning_rate=rate, **options)
    except (TypeError, ValueError) as e:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(f"optimizer={name} ({given}): {e}") from None
    if not isinstance(rate, float):
        rate.track(optimizer)
    return optimizer


def optimizer_kind(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Which of packexp's update rules reproduces ``optimizer``, or None when none does."""
    if any(getattr(optimizer, a, None) for a in EXTRAS):
        return None
    if isinstance(optimizer, keras.optimizers.Adam) and not optimizer.amsgrad:
        return "adam"
    if isinstance(optimizer, keras.optimizers.Adagrad):
        return "adagrad"
    if isinstance(optimizer, keras.optimizers.SGD) and not optimizer.nesterov:
        return "momentum" if optimizer.momentum else "sgd"
    return None


def apply_gradients(optimizer: keras.optimizers.Optimizer, grads: Sequence[tf.Tensor],
                    variables: Sequence[keras.Variable]) -> None:
    """``optimizer.apply(grads, variables)`` in a few operations per variable.

    Keras builds each variable's update from a dozen or more small operations and recomputes
    the step's scalars (step count, Adam's bias corrections) for every variable: 6,570
    operations for MobileNetV2's Adam update, more than its gradient (5,015), and the larger
    part of the time spent tracing a step. Here the scalars are computed once per step and
    each variable gets one of TensorFlow's training kernels (tf.keras 2 used the same):
    SGD and momentum give Keras's values bit for bit; Adam's kernel rounds ``1 - beta_1`` in
    float32 where Keras rounds it from a Python float, so it agrees with Keras's Adam to float32
    rounding (1e-7 relative a step). Adagrad, for which no kernel adds epsilon inside the
    square root as Keras does, keeps Keras's arithmetic with the scalars hoisted (bit for bit).
    Every member of every plain pack, and every member trained alone, takes this path, so
    packing changes nothing. Optimizers of other types or with extras (weight decay,
    clipping, EMA, accumulation, loss scaling), and variables with constraints, go through
    Keras.
    """
    kind = optimizer_kind(optimizer)
    if (kind is None or type(optimizer) not in _EXACT
            or any(v.dtype != "float32" for v in variables) or any(g is None for g in grads)
            or any(v.constraint is not None for v in variables)):  # Keras applies them
        optimizer.apply(grads, variables)
        return
    with tf.name_scope(optimizer.name):
        # One read: Keras passes the same value to every variable's update.
        lr = tf.convert_to_tensor(optimizer.learning_rate)
        index = optimizer._get_variable_index
        if kind == "adam":
            local_step = tf.cast(optimizer.iterations + 1, tf.float32)
            beta_1_power = tf.pow(tf.cast(optimizer.beta_1, tf.float32), local_step)
            beta_2_power = tf.pow(tf.cast(optimizer.beta_2, tf.float32), local_step)
            beta_1 = tf.constant(optimizer.beta_1, tf.float32)
            beta_2 = tf.constant(optimizer.beta_2, tf.float32)
            epsilon = tf.constant(optimizer.epsilon, tf.float32)
            for g, var in zip(grads, variables, strict=True):
                m = optimizer._momentums[index(var)]
                v = optimizer._velocities[index(var)]
                tf.raw_ops.ResourceApplyAdam(
                    var=var.value.handle, m=m.value.handle, v=v.value.handle,
                    beta1_power=beta_1_power, beta2_power=beta_2_power, lr=lr, beta1=beta_1,
                    beta2=beta_2, epsilon=epsilon, grad=g)
        elif kind == "adagrad":
            for g, var in zip(grads, variables, strict=True):
                acc = optimizer._accumulators[index(var)]
                acc.assign_add(tf.square(g))
                var.assign_sub(tf.divide(tf.multiply(lr, g),
                                         tf.sqrt(tf.add(acc.value, optimizer.epsilon))))
        elif kind == "momentum":
            momentum = tf.constant(optimizer.momentum, tf.float32)
            for g, var in zip(grads, variables, strict=True):
                m = optimizer.momentums[index(var)]
                tf.raw_ops.ResourceApplyKerasMomentum(
                    var=var.value.handle, accum=m.value.handle, lr=lr, grad=g,
                    momentum=momentum)
        else:
            for g, var in zip(grads, variables, strict=True):
                tf.raw_ops.ResourceApplyGradientDescent(var=var.value.handle, alpha=lr, delta=g)
        optimizer.iterations.assign_add(1)
