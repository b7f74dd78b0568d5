"""Keras optimizers by the names the search spaces use."""

from __future__ import annotations

import keras

# The paper's "Momentum" is SGD with momentum 0.9.
_OPTIMIZERS = {
    "adam": lambda lr: keras.optimizers.Adam(learning_rate=lr),
    "sgd": lambda lr: keras.optimizers.SGD(learning_rate=lr),
    "adagrad": lambda lr: keras.optimizers.Adagrad(learning_rate=lr),
    "momentum": lambda lr: keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
}
NAMES = tuple(_OPTIMIZERS)


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    if name not in _OPTIMIZERS:
        raise ValueError(f"optimizer={name!r}: known optimizers are {list(NAMES)}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate={learning_rate!r}: must be > 0")
    return _OPTIMIZERS[name](float(learning_rate))
