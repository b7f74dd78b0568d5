"""The members' models as one: ``fused_ops`` walks the template model's graph and checks that
every member's is the same architecture of layers with a fused form; ``FusedGraph`` stacks
their weights and runs the template's graph with those operations in place of its layers.
``convolutional`` and ``couples_rows`` read the same facts off one model for the plain
engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import keras
import tensorflow as tf

from packexp.packing.fused_base import Context, FusedOp, Stacked, Unfusable, named, tensor_rank
from packexp.packing.fused_ops import ACTIVATION_LAYERS, OPS, Conv2D
from packexp.packing.layout import IMAGE_RANK, VECTOR_RANK, fold


def _flat_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's layers in graph order, nested models' layers in their place.

    Raises:
        Unfusable: an operation that is not a layer (``x + y`` in a functional model), a
            layer called more than once, or several outputs.
    """
    graph = functional_graph(model)
    if len(graph.outputs) != 1:
        raise Unfusable(f"model {model.name} has several outputs")
    calls = Counter(id(node.operation) for nodes in graph._nodes_by_depth.values()
                    for node in nodes if node.operation is not None and not node.is_input)
    out = []
    for op in graph.operations:
        if isinstance(op, keras.layers.InputLayer):
            continue
        if calls[id(op)] > 1:
            raise Unfusable(f"layer {named(op)} is called more than once")
        if isinstance(op, keras.Model):
            out += _flat_layers(op)
        elif isinstance(op, keras.layers.Layer):
            out.append(op)
        else:
            raise Unfusable(f"operation {op.name} ({type(op).__name__}) is not a layer")
    return out


def functional_graph(model: keras.Model) -> keras.Model:
    """The functional graph of a model (a Sequential model's built one)."""
    graph = getattr(model, "_functional", None) or model
    if not hasattr(graph, "_run_through_graph") or len(graph.inputs) != 1:
        raise Unfusable(f"model {named(model)} is not a single-input functional model")
    return graph


def fused_ops(models: Sequence[keras.Model]) -> list[FusedOp]:
    """The fused operation of each layer of the template (first) model.

    Raises:
        Unfusable: the models differ in architecture, or a layer has no fused form.
    """
    per_model = [_flat_layers(m) for m in models]
    if len({len(layers) for layers in per_model}) != 1:
        raise Unfusable("members' models have different numbers of layers")
    for m in models:
        if (tensor_rank(m.inputs[0]) not in (IMAGE_RANK, VECTOR_RANK)
                or tensor_rank(m.outputs[0]) != 2):
            raise Unfusable("only classifiers of vectors or images fuse")
    ops = []
    for layers in zip(*per_model, strict=True):
        template = layers[0]
        activation = type(template) in ACTIVATION_LAYERS
        if any((type(x) in ACTIVATION_LAYERS) != activation or
               (not activation and type(x) is not type(template)) for x in layers):
            raise Unfusable(f"members' models have different layers ({named(template)})")
        op = next((cls for types, cls in OPS
                   if type(template) in (types if isinstance(types, tuple) else (types,))),
                  None)
        if op is None:
            raise Unfusable(f"layer {named(template)} has no fused form")
        ops.append(op(layers))
    return ops


def convolutional(model: keras.Model) -> bool:
    """Whether ``model`` holds convolutions (1-D, 2-D or 3-D), fusable or not: XLA makes
    their steps slower on a CPU and costs a compile (a 1-D CNN's pack: 48 s to trace)."""
    layers = keras.layers
    kinds = (layers.Conv1D, layers.Conv2D, layers.Conv3D, layers.DepthwiseConv1D,
             layers.DepthwiseConv2D, layers.SeparableConv1D, layers.SeparableConv2D,
             layers.Conv1DTranspose, layers.Conv2DTranspose, layers.Conv3DTranspose)
    return any(isinstance(layer, kinds) for layer in model._flatten_layers(include_self=False))


def couples_rows(model: keras.Model) -> bool:
    """Whether a row of ``model``'s batch affects another's output (BatchNormalization's
    batch statistics), so padded rows would change it."""
    return any(isinstance(layer, keras.layers.BatchNormalization)
               for layer in model._flatten_layers(include_self=False))


def has_grouped_convolutions(ops: Sequence[FusedOp]) -> bool:
    """Whether fusing makes grouped convolutions (Conv2D layers of several members)."""
    return any(isinstance(op, Conv2D) and len(op.layers) > 1 for op in ops)


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
