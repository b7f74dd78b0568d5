"""Adagrad: a running sum of squared gradients, Keras's epsilon inside the square root."""

from packexp.optim import Coefficients

KERAS_CLASS = "Adagrad"
DEFAULTS = {"epsilon": 1e-7, "initial_accumulator_value": 0.1}
V_INIT = "initial_accumulator_value"


def coefficients(epsilon: float, initial_accumulator_value: float) -> Coefficients:
    return Coefficients(v_keep=1.0, v_gain=1.0, eps_in=epsilon)
