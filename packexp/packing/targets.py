"""A regression's targets met by a member's one output: its squared-error loss and the sums
its validation metrics are made of. One definition for the plain, fused and looped programs,
so they agree; a classification's cross-entropy and correct counts stay in each program."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packexp.data import Scaling


def squared_errors(y: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
    """Each row's squared error: ``outputs`` ``[..., batch, 1]`` against ``y`` ``[..., batch]``."""
    return tf.square(outputs[..., 0] - tf.cast(y, outputs.dtype))


def error_sums(y: tf.Tensor, outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The squared and the absolute errors summed over the batch (the last axis but one of
    ``outputs``): what ``val_mse``, ``val_mae`` and ``val_r2`` are made of."""
    error = outputs[..., 0] - tf.cast(y, outputs.dtype)
    return tf.reduce_sum(tf.square(error), axis=-1), tf.reduce_sum(tf.abs(error), axis=-1)


def regression_metrics(squared: float, absolute: float, y_val: np.ndarray,
                       targets: Scaling | None = None) -> dict[str, float]:
    """A member's ``val_mse`` (its ``val_loss`` too), ``val_mae`` and ``val_r2`` from its summed
    errors over the validation targets ``y_val``, in the targets' own units. R² is
    1 - SSE / SST, SST the targets' sum of squares about their mean.

    Args:
        squared, absolute: The squared and the absolute errors summed over ``y_val``, in the
            units the member trained on.
        y_val: The validation targets the member was scored against.
        targets: The standardisation ``y_val`` went through (``Dataset.targets``); None: the
            targets are as given. An error of ``e`` there is ``e * std`` in the targets' units.
    """
    n = len(y_val)
    y = np.asarray(y_val, np.float64)
    total = float(np.sum((y - y.mean()) ** 2))
    # R² is a ratio of two sums in the same units, so the scale cancels; it is left as is.
    r2 = 1.0 - squared / total if total > 0 else float("nan")
    std = 1.0 if targets is None else float(np.asarray(targets.std, np.float64).reshape(-1)[0])
    return {"val_mse": squared * std**2 / n, "val_mae": absolute * std / n, "val_r2": r2}
