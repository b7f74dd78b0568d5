"""SGD with momentum (the paper's "Momentum", 0.9): ``m = mu * m - lr * g; w += m``."""

from packexp.optim import Coefficients

KERAS_CLASS = "SGD"
DEFAULTS = {"momentum": 0.9}
V_INIT = 0.0


def coefficients(momentum: float) -> Coefficients:
    # alpha = -1 turns w - (m * alpha) / 1 into Keras's w + m.
    return Coefficients(m_keep=momentum, m_gain=0.0, m_gain_lr=-1.0, m_store=1.0, step_lr=0.0,
                        step_const=-1.0)
