"""Adam (Kingma and Ba), with Keras's epsilon outside the square root."""

from packexp.optim import Coefficients

KERAS_CLASS = "Adam"
DEFAULTS = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
V_INIT = 0.0


def coefficients(beta_1: float, beta_2: float, epsilon: float) -> Coefficients:
    return Coefficients(m_keep=1.0, m_gain=1 - beta_1, m_decay=1.0, m_store=1.0, v_keep=1.0,
                        v_gain=1 - beta_2, v_decay=1.0, beta_1=beta_1, beta_2=beta_2,
                        eps_in=0.0, eps_out=epsilon)
