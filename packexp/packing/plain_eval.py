"""The plain program's evaluation: each member's own model scoring a validation batch, in
one traced program (``PlainEvaluators``, which scores a fused pack's unbuilt members too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import hydra
import keras
import numpy as np
import tensorflow as tf

from packexp.models.activation import choosing
from packexp.packing.data import DeviceData
from packexp.packing.member import Member
from packexp.packing.targets import error_sums

#: One validation batch's evaluation: (inputs, labels) to each member's correct count and
#: loss sum (a regression's: its squared and absolute errors summed), as arrays with one
#: value per member.
Evaluator = Callable[[Any, Any], tuple[np.ndarray, np.ndarray]]


def own_loss(data: DeviceData) -> Any:
    """The model's own loss (``model.loss``) as a Keras loss object; None without one."""
    return None if data.head.loss is None else hydra.utils.instantiate(data.head.loss)


class PlainEvaluators:
    """Each member's own model scoring a validation batch, every member (idle and failed
    ones included) in one traced program, kept by the members' positions."""

    def __init__(self, members: Sequence[Member], data: DeviceData) -> None:
        self.members = members
        self.data = data
        self._fns: dict[tuple[int, ...], Any] = {}
        # The model's own metrics: Keras objects per member, updated inside the traced
        # evaluation and read once it has seen every batch.
        self._loss = own_loss(data)
        self._metrics = [[hydra.utils.instantiate(node) for node in data.head.metrics]
                         for _ in members]

    def reset(self) -> None:
        for metric in (m for per_member in self._metrics for m in per_member):
            metric.reset_state()

    def values(self) -> list[dict[str, float]]:
        names = self.data.head.names
        return [{name: float(metric.result()) for name, metric in zip(names, per_member,
                                                                       strict=True)}
                for per_member in self._metrics]

    def get(self) -> tuple[Evaluator, bool]:
        """The evaluator of the members as they are now, and whether it was traced for it."""
        positions = tuple(range(len(self.members)))
        traced = positions not in self._fns
        if traced:
            self._fns[positions] = self._trace(list(self.members))
        plain = self._fns[positions]

        def fn(x, y):
            return tuple(t.numpy() for t in plain(x, y))

        return fn, traced

    def _trace(self, members: list[Member]):
        regression, own_loss_fn, own_metrics = self.data.regression, self._loss, self._metrics

        def evaluate(x, y):
            correct, losses = [], []  # a regression's: squared and absolute errors summed
            for i, m in enumerate(members):
                with choosing(m.model):  # never compiled
                    logits = m.model(m.preprocessing.evaluation(x), training=False)
                for metric in own_metrics[i]:
                    metric.update_state(y, logits)
                if regression:
                    squared, absolute = error_sums(y, logits)
                    correct.append(squared)
                    losses.append(absolute)
                    continue
                pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
                correct.append(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.float32)))
                if own_loss_fn is not None:  # its mean over the batch, as a sum
                    losses.append(own_loss_fn(y, logits) * tf.cast(tf.shape(y)[0], tf.float32))
                    continue
                per_example = keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)
                losses.append(tf.reduce_sum(per_example))
            return tf.stack(correct), tf.stack(losses)

        x_spec = self.data.example_spec
        y_spec = tf.TensorSpec([None], tf.float32 if regression else tf.int32)
        fn = tf.function(evaluate, input_signature=(x_spec, y_spec), autograph=False)
        return fn.get_concrete_function()
