"""Horizontal fusion: members of one architecture trained as one fused model (HFTA).

The members' layers run as fused operations (``fused_ops``): Dense layers as one batched
matmul over stacked kernels ``[members, in, out]``, convolutions as one grouped
convolution over member-major folded channels. Each member keeps its own activation,
optimizer type and hyper-parameters (vectors over the member axis), batch size (padded
to the largest and masked out of its loss and its BatchNorm statistics) and step budget
(a member whose budget is spent keeps its state).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from packexp import optim, telemetry
from packexp.models.stand_in import stand_in_of
from packexp.packing.data import DeviceData
from packexp.packing.fused_base import Context, Unfusable
from packexp.packing.fused_graph import (
    FusedGraph,
    fused_ops,
    has_grouped_convolutions,
)
from packexp.packing.member import Member
from packexp.packing.optimizers import general_update, optimizer_kind
from packexp.packing.plain_eval import Evaluator, PlainEvaluators
from packexp.packing.schedules import base_learning_rate, fraction, profile, schedule_of
from packexp.packing.stats import PackStats, account
from packexp.packing.targets import error_sums, squared_errors
from packexp.space.options import PackSettings, check_choice, why_not_fusable

log = logging.getLogger(__name__)

def grouped_conv_path(setting: str) -> str:
    """``native`` or ``split`` for the ``pack.grouped_conv`` setting on this device.

    ``native`` runs a fused pack's Conv2D layers as one grouped convolution, ``split`` as one
    convolution per member and a concatenation; ``auto``, native where the device can
    differentiate a grouped convolution (``telemetry.grouped_conv_gradients``).
    """
    check_choice("grouped_conv", setting)
    if setting == "auto":
        return "native" if telemetry.grouped_conv_gradients() else "split"
    if setting == "native" and not telemetry.grouped_conv_gradients():
        raise ValueError("grouped_conv=native: TensorFlow cannot differentiate a grouped "
                         "convolution on this device (a CPU with oneDNN off); use auto or split")
    return setting


def why_unfusable(members: Sequence[Member]) -> str | None:
    """Why ``members`` cannot train as one fused model whatever the settings (their layers,
    update rules or inputs); None when they can (``PackFacts.unfusable``)."""
    if any(stand_in_of(m.model) for m in members):
        return ("stand-ins (surrogate.scale) train in plain packs: a fused step has no "
                "per-weight rates")
    try:
        fused_ops([m.model for m in members])
    except Unfusable as e:
        return str(e)
    for m in members:
        if optimizer_kind(m.optimizer) is None:
            reason = why_not_fusable(m.trial.hparams) or "its optimizer has no fused update rule"
            return f"member {m.trial_id}: {reason}"
    if len({m.preprocessing for m in members}) != 1 or members[0].preprocessing.augments:
        return "members' preprocessing differs or augments"
    return None


class FusedPack:
    """The fused training state of a pack's members, and its compiled step.

    The members' Keras weights and optimizer state are read in when the pack is built and
    written back by ``write_back``, so checkpoints stay per member and in the plain format.
    Within a chunk of steps the state is carried through the loop as tensors and assigned
    to the variables once at the end, so the step is a pure function of the state.
    """

    def __init__(self, members: Sequence[Member], data: DeviceData, *,
                 jit_compile: bool = False, width: int = 1, grouped_conv: str = "auto",
                 batch: int | None = None) -> None:
        """``width``: the steps per chunk the step function is warmed up (compiled) for.
        ``grouped_conv``: how fused Conv2D layers run (``grouped_conv_path``).
        ``batch``: the bucket every member's rows are padded to, always masked, so every
        later pack of the search runs the one compiled shape (None: the largest member's
        batch, masked only when sizes differ)."""
        members = list(members)
        self.members = members
        self.data = data
        self.jit_compile = jit_compile
        # Whether batch sizes differ is traced (padded rows need masks); the sizes are not.
        self.bucket = batch
        self.padded = batch is not None or len({m.batch_size for m in members}) > 1
        self.graph = FusedGraph([m.model for m in members])
        #: "native" or "split" when the pack has grouped convolutions, else None
        self.grouped_conv = None
        if has_grouped_convolutions(self.graph.ops):
            self.grouped_conv = grouped_conv_path(grouped_conv)
            self.graph.split_groups(self.grouped_conv == "split")
            log.info("fused pack of %d: %s grouped convolutions", len(members),
                     "native" if self.grouped_conv == "native" else "per-member (split)")
        self.members_n = len(members)
        # Hyper-parameters are variables, so a reused pack takes new ones with no retrace:
        # each member's update rule is a row of coefficients (``packexp.optim``).
        self.sizes = tf.Variable(tf.zeros([self.members_n], tf.int32))
        self.lr = tf.Variable(tf.zeros([self.members_n]))
        self.coefficients = tf.Variable(tf.zeros([self.members_n, len(optim.FIELDS)]))
        self.iterations = tf.Variable(tf.zeros([self.members_n], tf.int64))
        # Learning-rate schedules: each member's profile is structure (traced), its horizon
        # a variable; None when every member's rate is constant.
        schedules = [schedule_of(m.optimizer) for m in members]
        self.profiles = (tuple(s.name if s else "constant" for s in schedules)
                         if any(schedules) else None)
        self.horizon = tf.Variable(tf.ones([self.members_n]))
        # The optimizer works on every trainable weight at once, flattened and joined per
        # member ([members, parameters]): a few operations per step however many weights
        # the model has, so the step traces and optimizes far faster.
        trainable = [self.graph.stacked[i].variable for i in self.graph.trainable]
        self._sizes = [int(np.prod(v.shape[1:])) for v in trainable]
        self._shapes = [v.shape for v in trainable]
        self.slot_m = tf.Variable(tf.zeros([self.members_n, sum(self._sizes)]))
        self.slot_v = tf.Variable(tf.zeros([self.members_n, sum(self._sizes)]))
        self.reload(stack=False)
        self._train = self._compile_train(width)
        self._eval = self._compile_eval()
        self._eval_traced = False

    def _flatten(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor:
        return tf.concat([tf.reshape(t, [self.members_n, -1]) for t in tensors], axis=1)

    def _unflatten(self, flat: tf.Tensor) -> list[tf.Tensor]:
        return [tf.reshape(t, shape) for t, shape in
                zip(tf.split(flat, self._sizes, axis=1), self._shapes, strict=True)]

    def reload(self, stack: bool = True) -> None:
        """Reads the members' Keras weights, optimizer state and hyper-parameters in.

        Called when the pack is built and when it is reused for new trials loaded into the
        same members (``Pack.reloaded``); the traced step reads only these variables.
        """
        members, opts = self.members, [m.optimizer for m in self.members]
        if stack:
            self.graph.restack()
        trainable = [self.graph.stacked[i] for i in self.graph.trainable]
        for flat, kind in ((self.slot_m, "m"), (self.slot_v, "v")):
            flat.assign(np.stack([
                np.concatenate([a.reshape(-1) for a in m.optimizer.slot_values(
                    kind, [s.weights[i] for s in trainable])])
                for i, m in enumerate(members)]))
        self.sizes.assign([m.batch_size for m in members])
        self.lr.assign([float(base_learning_rate(o).numpy()) for o in opts])
        self.coefficients.assign(np.stack([o.coefficients.numpy() for o in opts]))
        self.iterations.assign([int(o.iterations.numpy()) for o in opts])
        self.read_horizons()

    def read_horizons(self) -> None:
        """Reads the members' schedule horizons in (``Member.set_lr_horizon`` sets them)."""
        if self.profiles is not None:
            self.horizon.assign([float(s.horizon.numpy()) if s else 1.0
                                 for s in map(schedule_of, (m.optimizer for m in self.members))])

    def write_back(self) -> None:
        """Copies the stacked state back into each member's Keras model and optimizer."""
        self.graph.write_back()
        bounds = np.cumsum(self._sizes)[:-1]
        slot_m, slot_v = (np.split(flat, bounds, axis=1)
                          for flat in (self.slot_m.numpy(), self.slot_v.numpy()))
        iterations = self.iterations.numpy()
        for i, m in enumerate(self.members):
            m.optimizer.iterations.assign(iterations[i])
            weights = [self.graph.stacked[index].weights[i] for index in self.graph.trainable]
            for kind, values in (("m", slot_m), ("v", slot_v)):
                m.optimizer.set_slot_values(kind, weights, [values[j][i]
                                                            for j in range(len(weights))])

    def run_chunk(self, idxs: np.ndarray, ks: Sequence[int]) -> np.ndarray:
        """Trains ``ks[i]`` steps of member i from indices ``[members, steps, batch]``.

        Fused packs never augment, so nothing is seeded by step."""
        return self._train(tf.constant(idxs), tf.constant(np.asarray(ks, np.int32))).numpy()

    def trace_eval(self) -> bool:
        """Traces the evaluation function if it is not yet; returns whether it traced."""
        if self._eval_traced:
            return False
        self._eval.get_concrete_function()
        self._eval_traced = True
        return True

    def evaluate(self, x: tf.Tensor, y: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        correct, loss = self._eval(x, y)
        return correct.numpy(), loss.numpy()

    def _compile_train(self, width: int):
        x_all, y_all = self.data.x_train, self.data.y_train
        preprocess = self.members[0].preprocessing.evaluation  # fused packs never augment
        padded = self.padded
        regression = self.data.regression
        trainable = self.graph.trainable
        n = self.members_n

        def step(idx, active, params, slot_m, slot_v, iterations):
            """One step as a function of the state: returns the losses and the new state."""
            x = self.graph.inputs(preprocess(tf.gather(x_all, idx)), shared=False)
            y = tf.gather(y_all, idx)
            rows = tf.cast(tf.range(tf.shape(idx)[1])[None, :] < self.sizes[:, None],
                           tf.float32)  # [members, batch]: each member's real rows
            sizes = tf.cast(self.sizes, tf.float32)
            ctx = Context(n, params, training=True, rows=rows if padded else None,
                          active=active)
            weights = [params[i] for i in trainable]
            with tf.GradientTape() as tape:
                tape.watch(weights)
                logits = self.graph(x, ctx)
                # Keras's own loss, as the plain pack uses, so the two agree to rounding.
                per_row = (squared_errors(y, logits) if regression else
                           keras.losses.sparse_categorical_crossentropy(y, logits,
                                                                        from_logits=True))
                losses = tf.reduce_sum(per_row * rows, axis=1) / sizes
                total = tf.reduce_sum(tf.where(active, losses, 0.0))
            grads = tape.gradient(total, weights)
            new_w, slot_m, slot_v = self._apply(self._flatten(weights), self._flatten(grads),
                                                slot_m, slot_v, iterations, active)
            params = list(params)
            for i, w in zip(trainable, self._unflatten(new_w), strict=True):
                params[i] = w
            for i, value in ctx.updates.items():
                params[i] = value
            iterations = iterations + tf.cast(active, tf.int64)
            return tf.where(active, losses, 0.0), (params, slot_m, slot_v, iterations)

        variables = (self.graph.variables(), self.slot_m, self.slot_v, self.iterations)

        def train_chunk(idxs, ks):
            def body(t, sums, state):
                losses, state = step(idxs[:, t], t < ks, *state)
                return t + 1, sums + losses, state

            state = tf.nest.map_structure(lambda v: v.read_value(), variables)
            _, sums, state = tf.while_loop(lambda t, *_: t < tf.reduce_max(ks), body,
                                           (tf.constant(0), tf.zeros([n]), state))
            tf.nest.map_structure(lambda v, value: v.assign(value), variables, state)
            return sums / tf.cast(tf.maximum(ks, 1), tf.float32)

        fn = tf.function(train_chunk, autograph=False, jit_compile=self.jit_compile,
                         input_signature=(tf.TensorSpec([n, None, None], tf.int32),
                                          tf.TensorSpec([n], tf.int32)))
        batch = self.bucket or max(m.batch_size for m in self.members)
        fn(tf.zeros([n, width, batch], tf.int32), tf.zeros([n], tf.int32))
        return fn

    def _apply(self, w: tf.Tensor, g: tf.Tensor, m: tf.Tensor, v: tf.Tensor,
               iterations: tf.Tensor, active: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Each member's own update rule on its row: ``general_update`` with a column of
        coefficients per member, so members of every rule share the same operations.

        ``w``, ``g``, ``m`` and ``v`` are every trainable weight, gradient and slot flattened
        and joined per member (``[members, parameters]``). Members not ``active`` keep their
        state. Returns the new weights and slots.
        """
        step = tf.cast(iterations + 1, tf.float32)[:, None]
        lr = self.lr
        if self.profiles is not None:  # each member's schedule at its own step, as Keras's
            z = fraction(iterations, self.horizon)
            factor = tf.ones_like(z)
            for name in sorted(set(self.profiles) - {"constant"}):
                mask = tf.constant([p == name for p in self.profiles])
                factor = tf.where(mask, profile(name, z), factor)
            lr = lr * factor
        columns = dict(zip(optim.FIELDS, tf.unstack(self.coefficients[:, :, None], axis=1),
                           strict=True))
        delta, m1, v1 = general_update(g, m, v, columns, lr[:, None], step)
        keep = active[:, None]
        return (tf.where(keep, w - delta, w), tf.where(keep, m1, m), tf.where(keep, v1, v))

    def _compile_eval(self):
        regression = self.data.regression

        def evaluate(x, y):
            x = self.graph.inputs(self.members[0].preprocessing.evaluation(x), shared=True)
            logits = self.graph(x, Context(self.members_n, self.graph.variables()))
            if regression:  # each member's squared and absolute errors summed
                return error_sums(y[None], logits)
            pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct = tf.reduce_sum(tf.cast(tf.equal(pred, y[None]), tf.float32), axis=1)
            labels = tf.broadcast_to(y[None], tf.shape(pred))
            loss = tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), axis=1)
            return correct, loss

        x_spec = tf.TensorSpec([None, *self.data.x_val.shape[1:]], self.data.x_val.dtype)
        return tf.function(evaluate, autograph=False,
                           input_signature=(x_spec, tf.TensorSpec([None], self.data.y_val.dtype)))


class FusedProgram:
    """The fused program (``space.options.FUSED``): the members as one model with a member
    axis (``FusedPack``), built when the pack first trains and kept while its membership
    holds. Equal to training alone up to float rounding."""

    def __init__(self, members: Sequence[Member], data: DeviceData, settings: PackSettings,
                 *, jit_compile: bool, batch_bucket: int | None) -> None:
        self.members = members
        self.data = data
        self.settings = settings
        self.jit_compile = jit_compile  # as the plain pack decides: Dense models under auto
        self.batch_bucket = batch_bucket
        self._fused: FusedPack | None = None
        self._unbuilt = PlainEvaluators(members, data)  # scores the members before any training

    def reload(self) -> None:
        if self._fused is not None:
            self._fused.reload()

    def evaluator(self) -> tuple[Evaluator, bool]:
        if self._fused is None:
            return self._unbuilt.get()
        return self._fused.evaluate, self._fused.trace_eval()  # written back: state is current

    def train(self, remaining: dict[str, int]) -> PackStats:
        chunk, xla = self.settings.chunk_steps, self.jit_compile
        if self._fused is None:
            t0 = time.perf_counter()
            self._fused = FusedPack(self.members, self.data, jit_compile=xla,
                                    width=chunk if xla else 1,
                                    grouped_conv=self.settings.grouped_conv,
                                    batch=self.batch_bucket if xla else None)
            trace_s, programs = time.perf_counter() - t0, 1
        else:
            trace_s, programs = 0.0, 0
        fused = self._fused
        fused.read_horizons()
        stats = PackStats(members=sum(not m.idle for m in self.members), fused=True,
                          xla=fused.jit_compile, grouped_conv=fused.grouped_conv,
                          trace_s=trace_s, programs=programs)
        # The bucket (one compiled shape), or the largest batch of the members it now holds.
        batch = fused.bucket or max(m.batch_size for m in self.members)
        while True:
            ks = [min(remaining[m.trial_id], chunk) if not m.failed else 0
                  for m in self.members]
            n = max(ks)
            if n == 0:
                break
            width = chunk if fused.jit_compile else n  # one shape: one XLA compile
            idxs = np.zeros((len(self.members), width, batch), np.int32)
            for i, (m, k) in enumerate(zip(self.members, ks, strict=True)):
                if k:
                    idxs[i, :k, : m.batch_size] = m.next_batches(k)
            t0 = time.perf_counter()
            mean_losses = fused.run_chunk(idxs, ks)
            elapsed = time.perf_counter() - t0
            stats.steps += n
            stats.train_s += elapsed
            stats.chunk_step_ms.append(1000 * elapsed / n)
            account(self.members, ks, mean_losses, remaining)
        fused.write_back()
        return stats
