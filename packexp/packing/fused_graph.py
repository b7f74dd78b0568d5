"""The members' models as one: their weights stacked, and the template model's graph run with
the fused operations of ``fused_ops`` in place of its layers."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from packexp.packing.fused_ops import Context, Conv2D, Stacked, functional_graph, fused_ops
from packexp.packing.layout import IMAGE_RANK, fold


class FusedGraph:
    """The members' models as one: stacked weights and the template's graph of fused ops."""

    def __init__(self, models: Sequence[keras.Model]) -> None:
        self.models = list(models)
        self.members = len(models)
        self.ops = fused_ops(models)
        self.stacked: list[Stacked] = []
        for op in self.ops:
            op.build(self._stack)
        self._by_layer = {id(op.layer): op for op in self.ops}

    def _stack(self, weights: list[keras.Variable], shape: Sequence[int] | None = None) -> int:
        shape = list(weights[0].shape) if shape is None else list(shape)
        value = tf.stack([tf.reshape(w.value, shape) for w in weights])
        variable = tf.Variable(value, trainable=weights[0].trainable)
        self.stacked.append(Stacked(variable, list(weights), weights[0].trainable))
        return len(self.stacked) - 1

    def split_groups(self, split: bool) -> None:
        """Conv2D layers as per-member convolutions (``Conv2D.split``) from the next trace."""
        for op in self.ops:
            if isinstance(op, Conv2D):
                op.split = split

    @property
    def trainable(self) -> list[int]:
        """Indices of the trainable values in ``stacked`` (and ``Context.params``)."""
        return [i for i, s in enumerate(self.stacked) if s.trainable]

    def variables(self) -> list[tf.Variable]:
        return [s.variable for s in self.stacked]

    def restack(self) -> None:
        """Reads the members' own Keras weights into the stacked variables again."""
        for s in self.stacked:
            s.variable.assign(tf.stack([tf.reshape(w.value, s.variable.shape[1:])
                                        for w in s.weights]))

    def write_back(self) -> None:
        """Copies each member's slice into its own Keras weights."""
        for s in self.stacked:
            values = s.variable.numpy()
            for i, w in enumerate(s.weights):
                w.assign(values[i].reshape(w.shape))

    def inputs(self, x: tf.Tensor, shared: bool) -> tf.Tensor:
        """The fused input from per-member batches ``[members, batch, ...]``, or from one
        batch every member sees (``shared``, for evaluation)."""
        if x.shape.rank - (0 if shared else 1) == IMAGE_RANK:
            return tf.tile(x, [1, 1, 1, self.members]) if shared else fold(x)
        return tf.tile(x[None], [self.members, 1, 1]) if shared else x

    def __call__(self, x: tf.Tensor, ctx: Context) -> tf.Tensor:
        """Logits ``[members, batch, classes]`` of a fused input (see ``inputs``)."""
        return self._run(self.models[0], x, ctx)

    def _run(self, model: keras.Model, x: tf.Tensor, ctx: Context) -> tf.Tensor:
        def call(op, *args, **kwargs):
            if isinstance(op, keras.Model):
                return self._run(op, args[0], ctx)
            if isinstance(op, keras.layers.InputLayer):
                return args[0]
            return self._by_layer[id(op)](ctx, args[0])

        return functional_graph(model)._run_through_graph(x, operation_fn=lambda op: op,
                                                         call_fn=call)
