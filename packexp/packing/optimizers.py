"""Keras optimizers by the names the search spaces use, and their update in a step function."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from packexp.pack_options import OPTIMIZERS

# Classes whose update_step apply_gradients reproduces (a subclass may override it).
_EXACT = (keras.optimizers.Adam, keras.optimizers.SGD, keras.optimizers.Adagrad)
# Options under which an optimizer's update is more than its update rule.
_EXTRAS = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema",
           "gradient_accumulation_steps", "loss_scale_factor")


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer={name!r}: known optimizers are {list(OPTIMIZERS)}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate={learning_rate!r}: must be > 0")
    spec = OPTIMIZERS[name]
    return getattr(keras.optimizers, spec.keras_class)(learning_rate=float(learning_rate),
                                                        **spec.options)


def optimizer_kind(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Which of packexp's update rules reproduces ``optimizer``, or None when none does."""
    if any(getattr(optimizer, a, None) for a in _EXTRAS):
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
