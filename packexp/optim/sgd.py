"""Plain gradient descent: ``w -= lr * g``."""

from packexp.optim import Coefficients

KERAS_CLASS = "SGD"
DEFAULTS: dict[str, float] = {}
V_INIT = 0.0


def coefficients() -> Coefficients:
    return Coefficients()
