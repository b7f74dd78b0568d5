"""Horizontal fusion: members of one Dense architecture trained as one stacked model.

N Dense layers become one batched matmul over stacked kernels ``[members, in, out]`` with
biases ``[members, 1, out]`` (HFTA). Each member keeps its own activation, optimizer type
and hyper-parameters (vectors over the member axis), batch size (padded to the largest and
masked out of its loss) and step budget (a member whose budget is spent keeps its state).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.packing.data import DeviceData
from packexp.packing.member import Member

log = logging.getLogger(__name__)

KINDS = ("sgd", "momentum", "adam", "adagrad")


def dense_stack(model: keras.Model) -> list[keras.layers.Dense] | None:
    """The model's Dense layers when it is Dense layers only (after an optional Flatten)."""
    layers = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.Flatten | keras.layers.InputLayer):
            if layers:
                return None
            continue
        if not isinstance(layer, keras.layers.Dense) or not layer.use_bias:
            return None
        layers.append(layer)
    return layers or None


def optimizer_kind(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Which fused update rule reproduces ``optimizer``, or None when none does."""
    if any(getattr(optimizer, a, None) for a in ("weight_decay", "clipnorm", "clipvalue",
                                                  "global_clipnorm", "use_ema")):
        return None
    if isinstance(optimizer, keras.optimizers.Adam) and not optimizer.amsgrad:
        return "adam"
    if isinstance(optimizer, keras.optimizers.Adagrad):
        return "adagrad"
    if isinstance(optimizer, keras.optimizers.SGD) and not optimizer.nesterov:
        return "momentum" if optimizer.momentum else "sgd"
    return None


def why_not_fused(members: Sequence[Member], data_sharing: str) -> str | None:
    """None when ``members`` can train fused; otherwise the reason, for the log."""
    if data_sharing != "gather":
        return "fusion needs gather data sharing"
    stacks = [dense_stack(m.model) for m in members]
    if any(s is None for s in stacks):
        return "the model is not a stack of Dense layers"
    shapes = {tuple(tuple(w.shape) for layer in s for w in layer.weights) for s in stacks}
    if len(shapes) != 1:
        return "members' layer shapes differ"
    if any(optimizer_kind(m.optimizer) is None for m in members):
        return "an optimizer has no fused update rule"
    if len({m.preprocessing for m in members}) != 1 or members[0].preprocessing.augments:
        return "members' preprocessing differs or augments"
    return None


class FusedPack:
    """The fused training state of a pack's members, and its compiled step.

    The members' Keras weights and optimizer state are read in when the pack is built and
    written back by ``write_back``, so checkpoints stay per member and in the plain format.
    """

    def __init__(self, members: Sequence[Member], data: DeviceData, *,
                 jit_compile: bool = False) -> None:
        self.members = list(members)
        self.data = data
        self.jit_compile = jit_compile
        self.batch = max(m.batch_size for m in members)
        stacks = [dense_stack(m.model) for m in members]
        self._stacks = stacks
        self.depth = len(stacks[0])
        n = len(members)

        def stacked(values: list[np.ndarray]) -> tf.Variable:
            return tf.Variable(np.stack(values))

        self.weights: list[tf.Variable] = []
        for layer in range(self.depth):
            self.weights.append(stacked([s[layer].kernel.numpy() for s in stacks]))
            self.weights.append(stacked([s[layer].bias.numpy()[None, :] for s in stacks]))
        first, second = zip(*(_slots(m.optimizer) for m in members), strict=True)
        self.slot_m = [stacked([_slot_value(f, j, w) for f in first])
                       for j, w in enumerate(self.weights)]
        self.slot_v = [stacked([_slot_value(v, j, w) for v in second])
                       for j, w in enumerate(self.weights)]
        kinds = [optimizer_kind(m.optimizer) for m in members]
        self.kinds = [k for k in KINDS if k in kinds]
        self.kind = {k: tf.constant([x == k for x in kinds]) for k in self.kinds}
        opts = [m.optimizer for m in members]

        def vector(values: list[float]) -> tf.Tensor:
            return tf.constant(values, tf.float32)

        self.lr = vector([float(o.learning_rate.numpy()) for o in opts])
        self.momentum = vector([float(getattr(o, "momentum", 0.0) or 0.0) for o in opts])
        self.beta_1 = vector([float(getattr(o, "beta_1", 0.9)) for o in opts])
        self.beta_2 = vector([float(getattr(o, "beta_2", 0.999)) for o in opts])
        self.epsilon = vector([float(getattr(o, "epsilon", 1e-7) or 0.0) for o in opts])
        self.iterations = tf.Variable([int(o.iterations.numpy()) for o in opts], dtype=tf.int64)
        # Per layer, each member's activation, applied to its slice.
        self.activations = []
        for layer in range(self.depth):
            fns = [s[layer].activation for s in stacks]
            names = [f.__name__ for f in fns]
            self.activations.append([
                (fn, tf.constant([x == name for x in names])[:, None, None])
                for name, fn in dict(zip(names, fns, strict=True)).items()])
        self.members_n = n
        self._train = self._compile_train()
        self._eval = self._compile_eval()

    def write_back(self) -> None:
        """Copies the stacked state back into each member's Keras model and optimizer."""
        weights = [w.numpy() for w in self.weights]
        slot_m = [m.numpy() for m in self.slot_m]
        slot_v = [v.numpy() for v in self.slot_v]
        iterations = self.iterations.numpy()
        for i, (m, stack) in enumerate(zip(self.members, self._stacks, strict=True)):
            for layer in range(self.depth):
                stack[layer].kernel.assign(weights[2 * layer][i])
                stack[layer].bias.assign(weights[2 * layer + 1][i][0])
            m.optimizer.iterations.assign(iterations[i])
            first, second = _slots(m.optimizer)
            for j in range(len(weights)):
                if first is not None:
                    first[j].assign(slot_m[j][i].reshape(first[j].shape))
                if second is not None:
                    second[j].assign(slot_v[j][i].reshape(second[j].shape))

    def forward(self, x: tf.Tensor) -> tf.Tensor:
        """Logits ``[members, batch, classes]`` of inputs ``[members or 1, batch, features]``."""
        h = x
        for layer in range(self.depth):
            h = tf.matmul(h, self.weights[2 * layer]) + self.weights[2 * layer + 1]
            acts = self.activations[layer]
            if len(acts) == 1:
                h = acts[0][0](h)
            else:
                out = h
                for fn, mask in acts:
                    out = tf.where(mask, fn(h), out)
                h = out
        return h

    def run_chunk(self, idxs: np.ndarray, ks: Sequence[int], starts: Sequence[int]) -> np.ndarray:
        """Trains ``ks[i]`` steps of member i from indices ``[members, steps, batch]``."""
        del starts  # no augmentation in fused packs, so nothing is seeded by step
        return self._train(tf.constant(idxs), tf.constant(ks, tf.int32)).numpy()

    def evaluate(self, x: tf.Tensor, y: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        correct, loss = self._eval(x, y)
        return correct.numpy(), loss.numpy()

    def _features(self, x: tf.Tensor) -> tf.Tensor:
        x = self.members[0].preprocessing.evaluation(x)
        rank = len(self.data.dataset.input_shape)
        return tf.reshape(x, tf.concat([tf.shape(x)[:-rank], [-1]], axis=0))

    def _compile_train(self):
        x_all, y_all = self.data.x_train, self.data.y_train
        sizes = tf.constant([m.batch_size for m in self.members], tf.float32)
        rows = tf.cast(tf.range(self.batch)[None, :] < tf.constant(
            [m.batch_size for m in self.members])[:, None], tf.float32)  # [members, batch]

        def step(idx, active):
            x = self._features(tf.gather(x_all, idx))  # [members, batch, features]
            y = tf.gather(y_all, idx)
            with tf.GradientTape() as tape:
                logits = self.forward(x)
                # Keras's own loss, as the plain pack uses, so the two agree to rounding.
                per_row = keras.losses.sparse_categorical_crossentropy(y, logits,
                                                                       from_logits=True)
                losses = tf.reduce_sum(per_row * rows, axis=1) / sizes
                total = tf.reduce_sum(tf.where(active, losses, 0.0))
            grads = tape.gradient(total, self.weights)
            self._apply(grads, active)
            return tf.where(active, losses, 0.0)

        def train_chunk(idxs, ks):
            def body(t, sums):
                return t + 1, sums + step(idxs[:, t], t < ks)

            _, sums = tf.while_loop(lambda t, _: t < tf.reduce_max(ks), body,
                                    (tf.constant(0), tf.zeros([self.members_n])))
            return sums / tf.cast(tf.maximum(ks, 1), tf.float32)

        fn = tf.function(train_chunk, autograph=False, jit_compile=self.jit_compile,
                         input_signature=(tf.TensorSpec([self.members_n, None, self.batch],
                                                         tf.int32),
                                          tf.TensorSpec([self.members_n], tf.int32)))
        fn(tf.zeros([self.members_n, 1, self.batch], tf.int32),
           tf.zeros([self.members_n], tf.int32))
        return fn

    def _apply(self, grads: list[tf.Tensor], active: tf.Tensor) -> None:
        """Each member's own optimizer rule on its slice (Keras's update formulas).

        Only the rules of optimizer types present in the pack are computed; with several,
        each member's slice takes its own type's result.
        """
        def col(v: tf.Tensor) -> tf.Tensor:  # every stacked tensor is [members, a, b]
            return tf.reshape(v, [-1, 1, 1])

        kinds = self.kinds
        lr, mu = col(self.lr), col(self.momentum)
        b1, b2, eps = col(self.beta_1), col(self.beta_2), col(self.epsilon)
        step = tf.cast(self.iterations + 1, tf.float32)
        alpha = col(self.lr * tf.sqrt(1 - self.beta_2**step) / (1 - self.beta_1**step))
        on = col(active)
        masks = {k: col(self.kind[k]) for k in kinds}
        for w, g, m, v in zip(self.weights, grads, self.slot_m, self.slot_v, strict=True):
            rules = {}  # kind -> (new w, new m, new v)
            if "sgd" in kinds:
                rules["sgd"] = (w - g * lr, m, v)
            if "momentum" in kinds:
                mom = m * mu - g * lr
                rules["momentum"] = (w + mom, mom, v)
            if "adam" in kinds:
                m1 = m + (g - m) * (1 - b1)
                v1 = v + (tf.square(g) - v) * (1 - b2)
                rules["adam"] = (w - m1 * alpha / (tf.sqrt(v1) + eps), m1, v1)
            if "adagrad" in kinds:
                acc = v + tf.square(g)
                rules["adagrad"] = (w - lr * g / tf.sqrt(acc + eps), m, acc)
            new = list(rules[kinds[0]])
            for k in kinds[1:]:
                new = [tf.where(masks[k], r, n) for r, n in zip(rules[k], new, strict=True)]
            for var, value in zip((w, m, v), new, strict=True):
                if value is not var:
                    var.assign(tf.where(on, value, var))
        self.iterations.assign_add(tf.cast(active, tf.int64))

    def _compile_eval(self):
        def evaluate(x, y):
            logits = self.forward(self._features(x)[None])
            pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct = tf.reduce_sum(tf.cast(tf.equal(pred, y[None]), tf.float32), axis=1)
            labels = tf.broadcast_to(y[None], tf.shape(pred))
            loss = tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), axis=1)
            return correct, loss

        x_spec = tf.TensorSpec([None, *self.data.x_val.shape[1:]], self.data.x_val.dtype)
        return tf.function(evaluate, autograph=False,
                           input_signature=(x_spec, tf.TensorSpec([None], tf.int32)))


def _slots(optimizer: keras.optimizers.Optimizer) -> tuple[Any, Any]:
    """The optimizer's first and second slot lists in the fused layout (m, v)."""
    kind = optimizer_kind(optimizer)
    if kind == "adam":
        return optimizer._momentums, optimizer._velocities
    if kind == "adagrad":
        return None, optimizer._accumulators
    if kind == "momentum":
        return optimizer.momentums, None
    return None, None


def _slot_value(slots: Any, index: int, like: tf.Variable) -> np.ndarray:
    """One member's slot for stacked variable ``index``, in the stacked layout."""
    shape = like.shape[1:]
    return np.zeros(shape, np.float32) if slots is None else slots[index].numpy().reshape(shape)
