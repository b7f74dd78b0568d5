"""Learning-rate schedules over a member's budget: ``lr = base * profile(step / horizon)``.

A schedule is a function of the member's own step (its optimizer's ``iterations``), so a
member decays the same packed or alone, fused or plain, continued from a checkpoint or
trained in one go. Its base learning rate and horizon are variables: a kept pack takes a new
trial's learning rate and a new rung's horizon without tracing again, and both travel in the
member's state and checkpoint with the optimizer's own variables.

The profiles, of ``z = min(step / horizon, 1)``:

- ``constant``: 1.
- ``step``: 1, then 0.1 from half the horizon, 0.01 from three quarters.
- ``linear``: ``1 - z``.
- ``cosine``: ``(1 + cos(pi z)) / 2``.
- ``exponential``: ``0.01 ** z``, down to 1% at the horizon.
- ``rex``: ``(1 - z) / (1 - z / 2)``, the reflected exponential profile of Chen, Wolfe and
  Kyrillidis ("REX: Revisiting Budgeted Training with an Improved Schedule", MLSys 2022),
  sampled every step as the paper does.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from packexp.space.options import LR_SCHEDULES


def profile(name: str, z: tf.Tensor) -> tf.Tensor:
    """The profile ``name`` at budget fractions ``z`` (float32, any shape, within [0, 1])."""
    if name == "constant":
        return tf.ones_like(z)
    if name == "step":
        return tf.pow(0.1, tf.cast(z >= 0.5, tf.float32) + tf.cast(z >= 0.75, tf.float32))
    if name == "linear":
        return 1.0 - z
    if name == "cosine":
        return 0.5 * (1.0 + tf.cos(math.pi * z))
    if name == "exponential":
        return tf.pow(0.01, z)
    if name == "rex":
        return (1.0 - z) / (1.0 - 0.5 * z)
    raise ValueError(f"lr_schedule={name!r}: must be one of {list(LR_SCHEDULES)}")


def fraction(step: tf.Tensor, horizon: tf.Tensor) -> tf.Tensor:
    """``min(step / horizon, 1)`` in float32: how much of its budget a member has used."""
    return tf.minimum(tf.cast(step, tf.float32) / tf.cast(horizon, tf.float32), 1.0)


class BudgetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``base * profile(min(step / horizon, 1))`` with ``base`` and ``horizon`` as variables.

    ``track`` adds the two variables to an optimizer's, so ``optimizer.variables`` (what a
    member's state and checkpoint hold) carries them.
    """

    def __init__(self, name: str, base: float, horizon: int = 1) -> None:
        profile(name, tf.zeros([]))  # a bad name fails here, not in the step function
        self.name = name
        self.base = keras.Variable(float(base), dtype="float32", trainable=False,
                                   name="base_learning_rate")
        self.horizon = keras.Variable(float(max(1, horizon)), dtype="float32", trainable=False,
                                      name="lr_horizon")

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        return self.base * profile(self.name, fraction(step, self.horizon))

    def track(self, optimizer: keras.optimizers.Optimizer) -> None:
        for variable in (self.base, self.horizon):
            optimizer._track_variable(variable)

    def get_config(self) -> dict:
        return {"name": self.name, "base": float(self.base.numpy()),
                "horizon": int(self.horizon.numpy())}


def schedule_of(optimizer: keras.optimizers.Optimizer) -> BudgetSchedule | None:
    """The optimizer's ``BudgetSchedule``, or None when its learning rate is constant."""
    schedule = getattr(optimizer, "_learning_rate", None)
    return schedule if isinstance(schedule, BudgetSchedule) else None


def base_learning_rate(optimizer: keras.optimizers.Optimizer) -> keras.Variable:
    """The variable holding the optimizer's learning rate, or its schedule's base rate."""
    schedule = schedule_of(optimizer)
    return schedule.base if schedule is not None else optimizer._learning_rate


def set_horizon(optimizer: keras.optimizers.Optimizer, steps: int) -> None:
    """Ends the optimizer's schedule after ``steps`` of its own steps; no schedule, no-op."""
    schedule = schedule_of(optimizer)
    if schedule is not None:
        schedule.horizon.assign(float(max(1, steps)))
