"""Keras layers in fused form: one operation computes the same layer of every member.

A fused tensor holds all members' activations in one of two layouts, chosen by the rank a
member's own tensor has:

- images (``[batch, height, width, channels]`` per member) are *folded* to
  ``[batch, height, width, members * channels]`` with member-major channels. N Conv2D
  layers are then one grouped convolution (``groups=N``), N DepthwiseConv2D layers one
  depthwise convolution, and per-channel operations (BatchNorm, pooling, padding,
  resizing) act on each member's own channels by construction (HFTA's layout);
- vectors (``[batch, features]`` per member) are *stacked* to ``[members, batch, features]``:
  N Dense layers are one batched matmul over kernels ``[members, in, out]``.

``fused_graph.fused_ops`` checks that the members' models are one architecture made of
layers with a fused form and returns these operations (``FusedGraph`` runs them). A layer
has a fused form only if it is one of ``OPS``'s Keras classes itself (a subclass may
compute something else), float32, and free of what the fused step leaves out: random draws,
regularization losses and weight constraints. Anything else raises ``Unfusable`` naming the
layer, and the pack trains plain. ``fused_base`` holds what the operations share (``FusedOp``,
``Context``, ``Stacked``) and the checks every layer passes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.models.activation import SelectActivation
from packexp.packing.fused_base import (
    NOT_ELEMENTWISE,
    Context,
    FusedOp,
    Unfusable,
    check_activations,
    input_rank,
    layer_config,
    named,
    tensor_rank,
)
from packexp.packing.layout import (
    IMAGE_RANK,
    VECTOR_RANK,
    by_choice,
    per_member,
    stack_vectors,
    unfold,
)


def _activation_key(layer: keras.layers.Layer) -> Any:
    if isinstance(layer, keras.layers.Activation):
        return layer.activation
    return (type(layer).__name__, repr(sorted(layer_config(layer).items())))


class Elementwise(FusedOp):
    """Activation layers; members may differ in which (ReLU6 in one, tanh in another)."""

    def check(self) -> None:
        check_activations(self.layers)

    def __call__(self, ctx: Context, x: tf.Tensor) -> tf.Tensor:
        return per_member(x, [layer.call for layer in self.layers],
                          [_activation_key(layer) for layer in self.layers])


class Selected(FusedOp):
    """``SelectActivation`` layers: each member's choice is read when the step runs, so one
    traced step serves members of every activation."""

    def check(self) -> None:
        super().check()
        names = self.layer.choices
        for name in names:
            if name in NOT_ELEMENTWISE or getattr(keras.activations, name, None) is None:
                raise Unfusable(f"layer {named(self.layer)}: activation {name} is not one of "
                                "Keras's elementwise activations")

    def __call__(self, ctx: Context, x: tf.Tensor) -> tf.Tensor:
        choice = tf.stack([layer.choice for layer in self.layers])
        return by_choice(x, choice, self.layer.functions)


class _Weighted(FusedOp):
    """A layer with a kernel, an optional bias and an activation of its own."""

    def check(self):
        super().check()
        check_activations(self.layers)
        if any(getattr(layer, "lora_enabled", False) or getattr(layer, "quantization_mode", None)
               for layer in self.layers):
            raise Unfusable(f"layer {named(self.layer)} is LoRA-adapted or quantized")

    def build(self, stack):
        self.kernel = stack([layer.kernel for layer in self.layers])
        self.bias = stack([layer.bias for layer in self.layers], self.bias_shape) \
            if self.layer.use_bias else None

    bias_shape: Sequence[int] | None = None  # the stacked bias's shape per member

    def __call__(self, ctx, x):
        h = self.apply_kernel(x, ctx[self.kernel])
        if self.bias is not None:
            h = h + self.bias_view(ctx[self.bias])
        fns = [layer.activation for layer in self.layers]
        return per_member(h, fns, fns)

    def apply_kernel(self, x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def bias_view(self, bias: tf.Tensor) -> tf.Tensor:
        return bias


class Dense(_Weighted):
    ranks = (VECTOR_RANK,)

    @property
    def bias_shape(self):
        return [1, self.layer.units]  # broadcasts over the batch: [members, 1, out]

    def apply_kernel(self, x, kernel):
        return tf.matmul(x, kernel)  # [members, batch, in] x [members, in, out]


class _Convolution(_Weighted):
    ranks = (IMAGE_RANK,)

    def check(self):
        super().check()
        if self.layer.data_format != "channels_last" or getattr(self.layer, "groups", 1) != 1:
            raise Unfusable(f"layer {named(self.layer)} is grouped or channels-first")

    def bias_view(self, bias):
        return tf.reshape(bias, [-1])  # [members, c] -> member-major, like folded channels


class Conv2D(_Convolution):
    """N convolutions as one grouped convolution over folded channels.

    With ``split`` (set by ``FusedGraph``), N convolutions over the members' channel blocks
    and one concatenation instead: the same numbers where a device cannot differentiate a
    grouped convolution (a CPU without oneDNN).
    """

    split = False

    def apply_kernel(self, x, kernel):
        n, kh, kw, cin, cout = kernel.shape  # [members, kh, kw, in, out]
        conv = functools.partial(tf.nn.conv2d, strides=self.layer.strides,
                                 padding=self.layer.padding.upper(),
                                 dilations=self.layer.dilation_rate)
        if self.split and n > 1:
            return tf.concat([conv(x[..., i * cin : (i + 1) * cin], kernel[i])
                              for i in range(n)], axis=-1)
        return conv(x, tf.reshape(tf.transpose(kernel, [1, 2, 3, 0, 4]), [kh, kw, cin, n * cout]))


class DepthwiseConv2D(_Convolution):
    """N depthwise convolutions as one over the folded channels."""

    def apply_kernel(self, x, kernel):
        n, kh, kw, c, mult = kernel.shape  # [members, kh, kw, c, multiplier]
        folded = tf.reshape(tf.transpose(kernel, [1, 2, 0, 3, 4]), [kh, kw, n * c, mult])
        return tf.nn.depthwise_conv2d(x, folded, strides=(1, *self.layer.strides, 1),
                                      padding=self.layer.padding.upper(),
                                      dilations=self.layer.dilation_rate)


class BatchNormalization(FusedOp):
    """Per-member BatchNorm: statistics per folded channel, or per member when stacked.

    Padded rows (smaller batch sizes) are left out of the batch statistics, and moving
    statistics change only for members that take the step.
    """

    def check(self):
        super().check()
        layer = self.layer
        if layer.axis not in (-1, input_rank(layer) - 1) or layer.renorm or layer.synchronized:
            raise Unfusable(f"layer {named(layer)} is not over the last axis")

    def build(self, stack):
        def weights(name):
            return stack([getattr(layer, name) for layer in self.layers])

        self.gamma = weights("gamma") if self.layer.scale else None
        self.beta = weights("beta") if self.layer.center else None
        self.moving_mean = weights("moving_mean")
        self.moving_variance = weights("moving_variance")

    def __call__(self, ctx, x):
        folded = x.shape.rank == IMAGE_RANK

        def view(index):  # [members, c] -> folded [members * c] or stacked [members, 1, c]
            if index is None:
                return None
            v = ctx[index]
            return tf.reshape(v, [-1]) if folded else v[:, None, :]

        if ctx.training:
            axes = [0, 1, 2] if folded else [1]
            if ctx.rows is None:
                mean, variance = tf.nn.moments(x, axes, keepdims=not folded)
            else:
                c = x.shape[-1] // ctx.members
                w = (tf.repeat(tf.transpose(ctx.rows), c, axis=1)[:, None, None, :] if folded
                     else ctx.rows[:, :, None])
                mean, variance = tf.nn.weighted_moments(x, axes, w, keepdims=not folded)
            momentum = self.layer.momentum
            for index, stat in ((self.moving_mean, mean), (self.moving_variance, variance)):
                old = ctx[index]
                new = old * momentum + tf.reshape(stat, old.shape) * (1.0 - momentum)
                ctx.updates[index] = tf.where(ctx.active[:, None], new, old)
        else:
            mean, variance = view(self.moving_mean), view(self.moving_variance)
        return tf.nn.batch_normalization(x, mean, variance, view(self.beta), view(self.gamma),
                                         self.layer.epsilon)


class Channelwise(FusedOp):
    """Weightless layers that act on each channel alone (padding, pooling, resizing)."""

    ranks = (IMAGE_RANK,)

    def check(self):
        super().check()
        if getattr(self.layer, "data_format", "channels_last") != "channels_last":
            raise Unfusable(f"layer {named(self.layer)} is channels-first")


class Rescaling(FusedOp):
    def check(self):
        super().check()
        if np.size(self.layer.scale) != 1 or np.size(self.layer.offset) != 1:
            raise Unfusable(f"layer {named(self.layer)} has per-channel factors")


class GlobalPooling2D(Channelwise):
    def __call__(self, ctx, x):
        h = self.layer.call(x)  # [batch, members * c], or [batch, 1, 1, members * c]
        return h if self.layer.keepdims else stack_vectors(h, ctx.members)


class Flatten(FusedOp):
    def check(self):
        super().check()
        if self.layer.data_format != "channels_last":
            raise Unfusable(f"layer {named(self.layer)} is channels-first")

    def __call__(self, ctx, x):
        if x.shape.rank == IMAGE_RANK:
            x = unfold(x, ctx.members)
            return tf.reshape(x, [ctx.members, -1, x.shape[2] * x.shape[3] * x.shape[4]])
        return x


class Add(FusedOp):
    def __call__(self, ctx, xs):
        return functools.reduce(tf.add, xs)  # Keras's order


class Concatenate(FusedOp):
    """Concatenation over channels, member by member in the folded layout."""

    def check(self):
        super().check()
        ranks = {tensor_rank(t) for t in self.layer.input}
        if len(ranks) != 1 or self.layer.axis not in (-1, ranks.pop() - 1):
            raise Unfusable(f"layer {named(self.layer)} is not over the last axis")

    def __call__(self, ctx, xs):
        if xs[0].shape.rank != IMAGE_RANK:
            return tf.concat(xs, axis=-1)
        n = ctx.members
        h, w = xs[0].shape[1], xs[0].shape[2]
        parts = [tf.reshape(x, [-1, h, w, n, x.shape[-1] // n]) for x in xs]
        joined = tf.concat(parts, axis=-1)
        return tf.reshape(joined, [-1, h, w, joined.shape[3] * joined.shape[4]])


class Identity(FusedOp):
    def check(self):
        super().check()
        rate = getattr(self.layer, "rate", 0)
        if rate:
            # Each member's mask is Keras's draw at its own batch size; padded to the
            # largest, the fused draw would differ.
            raise Unfusable(f"layer {named(self.layer)} draws random masks (rate {rate}), "
                            "which fused packs do not")

    def __call__(self, ctx, x):
        return x


ACTIVATION_LAYERS = (keras.layers.Activation, keras.layers.ReLU, keras.layers.LeakyReLU,
                     keras.layers.ELU)

#: Keras layer classes -> their fused operation. A layer's own class must be listed: a
#: subclass may compute something else.
OPS: tuple[tuple[type | tuple[type, ...], type[FusedOp]], ...] = (
    (keras.layers.Dense, Dense),
    (keras.layers.DepthwiseConv2D, DepthwiseConv2D),
    (keras.layers.Conv2D, Conv2D),
    (keras.layers.BatchNormalization, BatchNormalization),
    (ACTIVATION_LAYERS, Elementwise),
    (SelectActivation, Selected),
    (keras.layers.Add, Add),
    (keras.layers.Concatenate, Concatenate),
    ((keras.layers.GlobalAveragePooling2D, keras.layers.GlobalMaxPooling2D), GlobalPooling2D),
    ((keras.layers.ZeroPadding2D, keras.layers.Cropping2D, keras.layers.MaxPooling2D,
      keras.layers.AveragePooling2D, keras.layers.Resizing), Channelwise),
    (keras.layers.Rescaling, Rescaling),
    (keras.layers.Flatten, Flatten),
    (keras.layers.Dropout, Identity),
)
