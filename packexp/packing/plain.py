"""The plain program: every member's own Keras model and optimizer, side by side in one
traced step (``space.options.PLAIN``). Bit for bit what each member gets trained alone."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.models.activation import choosing
from packexp.models.stand_in import stand_in_of
from packexp.packing.data import DeviceData, batch_indices
from packexp.packing.fused_graph import couples_rows
from packexp.packing.member import Member
from packexp.packing.optimizers import apply_gradients
from packexp.packing.plain_eval import Evaluator, PlainEvaluators, own_loss
from packexp.packing.stats import PackStats, account
from packexp.packing.targets import squared_errors
from packexp.space.options import PackSettings


class PlainProgram:
    """A pack's members trained by their own models and optimizers in one step function.

    A member whose budget is spent skips the step (``misaligned=mask``) or leaves, and the
    step is rebuilt for the rest (``switch``). Batches are gathered per member by its own
    seeded order (``data_sharing=gather``) or cut from one shared stream (``slice``); see
    ``Pack``. Step and evaluation functions are kept by the members' positions (and step
    functions by whether each member's batches are padded, which their loss is traced
    with), so a reloaded pack (new trials in the same models) runs them again untraced.
    """

    def __init__(self, members: Sequence[Member], data: DeviceData, settings: PackSettings,
                 *, jit_compile: bool, batch_bucket: int | None) -> None:
        self.members = members
        self.data = data
        self.settings = settings
        self.jit_compile = jit_compile
        self.batch_bucket = batch_bucket
        self.chunk_steps = settings.chunk_steps
        self.sliced = settings.data_sharing == "slice" and not data.streams
        self._stream_step = 0
        self._couples_rows: dict[int, bool] = {}
        self._loss = own_loss(data) or keras.losses.SparseCategoricalCrossentropy(
            from_logits=True)
        self._compiled: dict[tuple, Any] = {}
        self._evaluators = PlainEvaluators(members, data)

    def reload(self) -> None:
        """New member states in the same models: the shared stream starts again."""
        self._stream_step = 0

    def evaluator(self) -> tuple[Evaluator, bool]:
        return self._evaluators.get()

    def reset_metrics(self) -> None:
        """Zeroes the model's own metrics of every member, before an evaluation."""
        self._evaluators.reset()

    def metric_values(self) -> list[dict[str, float]]:
        """Each member's own metrics over the evaluation since ``reset_metrics``."""
        return self._evaluators.values()

    def train(self, remaining: dict[str, int]) -> PackStats:
        stats = PackStats(members=sum(not m.idle for m in self.members), xla=self.jit_compile)
        if self.data.streams:
            return self._train_streamed(remaining, stats)
        while True:
            active = [m for m in self.members if remaining[m.trial_id] > 0 and not m.failed]
            if not active:
                return stats
            budgets = {remaining[m.trial_id] for m in active}
            # A compiled pack always runs its masked program: one compile, whatever the budgets.
            if self.settings.misaligned == "switch" or (
                    len(budgets) == 1 and active == self.members and not self.jit_compile):
                group, masked = active, False
                k = min(min(budgets), self.chunk_steps)
                ks = [k] * len(group)
            else:
                group, masked = list(self.members), True
                ks = [min(remaining[m.trial_id], self.chunk_steps) if m in active else 0
                      for m in group]
            fn = self._step_fn(group, masked, stats)
            account(group, ks, self._run_chunk(fn, group, ks, stats), remaining)

    def _train_streamed(self, remaining: dict[str, int], stats: PackStats) -> PackStats:
        """Trains on a stream: each epoch's rows are read once, block by block, for every
        member in that epoch, and each member takes its next batches from the block at its
        own batch size. A member's step ``t`` of an epoch is rows ``t*b:(t+1)*b`` of the
        epoch's order, as alone; the one masked program runs whatever steps a block allows."""
        members = list(self.members)
        fn = self._step_fn(members, True, stats)
        while True:
            active = [m for m in members if remaining[m.trial_id] > 0 and not m.failed]
            if not active:
                return stats
            epoch = min(m.step // m.steps_per_epoch for m in active)
            # Each reader's rows of this epoch: from where it is to where its budget or the
            # epoch ends.
            pos, end = {}, {}
            for m in active:
                if m.step // m.steps_per_epoch == epoch:
                    done = m.step % m.steps_per_epoch
                    pos[m.trial_id] = m.batch_size * done
                    end[m.trial_id] = m.batch_size * min(m.steps_per_epoch,
                                                         done + remaining[m.trial_id])
            base, carry = min(pos.values()), None  # the first row held
            blocks = self.data.train_blocks(epoch, base, max(end.values()))
            while True:
                t0 = time.perf_counter()
                x, y = next(blocks, (None, None))  # waiting for files read and decoded
                stats.read_s += time.perf_counter() - t0
                if x is None:
                    break
                if carry is not None:
                    x, y = tf.concat([carry[0], x], 0), tf.concat([carry[1], y], 0)
                held = base + int(x.shape[0])
                if self.jit_compile:  # one shape, one compile
                    rows = self.data.dataset.block + max(m.batch_size for m in members)
                    pad = [[0, rows - int(x.shape[0])]]
                    x, y = tf.pad(x, pad + [[0, 0]] * (x.shape.rank - 1)), tf.pad(y, pad)
                self._train_block(fn, members, pos, end, remaining, base, held, x, y, stats)
                failed = {m.trial_id: m.failed for m in members}
                # What a reader still needs of the rows held: less than one of its batches
                # (a member that failed needs none).
                needed = [p for t, p in pos.items() if p < end[t] and not failed[t]]
                if not needed:  # the readers left (failed) or are done: read no further
                    break
                keep = min(needed)
                carry = (x[keep - base:held - base], y[keep - base:held - base])
                base = keep

    def _train_block(self, fn, members: list[Member], pos: dict[str, int],
                     end: dict[str, int], remaining: dict[str, int], base: int, held: int,
                     x: tf.Tensor, y: tf.Tensor, stats: PackStats) -> None:
        """Every reader's steps whose rows lie in ``base:held`` (``pos`` is where each is),
        in chunks of at most ``chunk_steps``."""
        while True:
            ks = [max(0, min((min(held, end[m.trial_id]) - pos[m.trial_id]) // m.batch_size,
                             self.chunk_steps))
                  if m.trial_id in pos and not m.failed else 0 for m in members]
            n = max(ks)
            if n == 0:
                return
            width = self.chunk_steps if self.jit_compile else n
            idxs = []
            for m, k in zip(members, ks, strict=True):
                batches = np.zeros((width, m.batch_size), np.int32)
                if k:
                    row = pos[m.trial_id] - base
                    batches[:k] = np.arange(row, row + k * m.batch_size).reshape(k, m.batch_size)
                    pos[m.trial_id] += k * m.batch_size
                idxs.append(tf.constant(batches))
            starts = [m.step for m in members]
            seeds = [m.trial.seed for m in members]
            sizes = [m.batch_size for m in members]
            t0 = time.perf_counter()
            losses = fn(tuple(idxs), tf.constant(ks, tf.int32), tf.constant(starts, tf.int64),
                        tf.constant(seeds, tf.int64), tf.constant(sizes, tf.int32),
                        x, y).numpy()
            elapsed = time.perf_counter() - t0
            stats.steps += n
            stats.train_s += elapsed
            stats.chunk_step_ms.append(1000 * elapsed / n)
            account(members, ks, losses, remaining)

    def _pads(self, member: Member) -> bool:
        """Whether ``member`` trains on batches padded to the bucket (XLA, gathered batches,
        rows independent of each other: no BatchNormalization)."""
        if not (self.jit_compile and self.batch_bucket and not self.sliced
                and member.batch_size <= self.batch_bucket and self.data.head.loss is None):
            return False
        # Per chunk and member: the model's layers are walked once per model, not every call.
        coupled = self._couples_rows.get(id(member.model))
        if coupled is None:
            coupled = self._couples_rows[id(member.model)] = couples_rows(member.model)
        return not coupled

    def _step_fn(self, group: list[Member], masked: bool, stats: PackStats):
        # By position: a reused pack's members are new trials in the same models. Whether a
        # member's batches are padded is traced into the program (its loss masks the padded
        # rows or takes the mean of all), so a new trial padded where the last was not (a
        # batch above the bucket before) takes a program of its own.
        key = (tuple(self.members.index(m) for m in group), masked,
               tuple(self._pads(m) for m in group))
        switch = stats.group is not None and key != stats.group  # a member left
        stats.group = key
        stats.switches += switch
        if key not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[key] = self._compile_train(group, masked)
            stats.programs += 1
            built = time.perf_counter() - t0
            stats.trace_s += built
            if switch:
                stats.switch_overhead_s += built
        return self._compiled[key]

    def _run_chunk(self, fn, group: list[Member], ks: list[int], stats: PackStats) -> np.ndarray:
        n = max(ks)
        width = self.chunk_steps if self.jit_compile else n  # a fixed shape spares XLA a recompile
        if self.sliced:
            leader = _leader(group)
            batches = np.zeros((width, leader.batch_size), np.int32)
            batches[:n] = batch_indices(leader.trial.seed, self.data.train_size,
                                        leader.batch_size, self._stream_step, n)
            idxs = (tf.constant(batches),)
            starts = [self._stream_step]
            self._stream_step += n
        else:
            idxs = []
            for m, k in zip(group, ks, strict=True):
                batches = np.zeros((width, self.batch_bucket if self._pads(m) else m.batch_size),
                                   np.int32)
                batches[:k, : m.batch_size] = m.next_batches(k)
                idxs.append(tf.constant(batches))
            idxs = tuple(idxs)
            starts = [m.step for m in group]
        seeds = [m.trial.seed for m in ([_leader(group)] if self.sliced else group)]
        t0 = time.perf_counter()
        sizes = [m.batch_size for m in group]
        mean_losses = fn(idxs, tf.constant(ks, tf.int32), tf.constant(starts, tf.int64),
                         tf.constant(seeds, tf.int64), tf.constant(sizes, tf.int32)).numpy()
        elapsed = time.perf_counter() - t0
        stats.steps += n
        stats.train_s += elapsed
        stats.chunk_step_ms.append(1000 * elapsed / n)
        return mean_losses

    def _compile_train(self, members: list[Member], masked: bool):
        """Traces and warms up the step function of ``members`` (zero steps, no update).

        The returned function takes the batch indices ``[steps, batch]`` (one per member, or
        one shared stream when slicing), the steps each member takes ``[members]``, the
        global step each index stream starts at and each stream's seed (for augmentation),
        and returns each member's mean loss. Batch sizes, seeds and learning rates are
        inputs or variables, never traced constants, so a reused pack runs new trials on
        the same function.
        """
        streamed = self.data.streams  # the block trained on is an input, not a constant
        x, y = (None, None) if streamed else (self.data.x_train, self.data.y_train)
        loss_fn = self._loss
        variables = [m.model.trainable_variables for m in members]
        rates = [stand_in.rates if (stand_in := stand_in_of(m.model)) else None
                 for m in members]
        sliced = self.sliced

        def member_batches(idxs, starts, seeds, t, x, y):
            """One thunk per member giving its (inputs, labels) at step ``t``."""
            if not sliced:
                def gather(i):
                    batch = idxs[i][t]
                    seed = tf.stack([seeds[i], starts[i] + tf.cast(t, tf.int64)])
                    return members[i].preprocessing(tf.gather(x, batch), seed), tf.gather(y, batch)

                return [lambda i=i: gather(i) for i in range(len(members))]
            batch = idxs[0][t]
            raw, labels = tf.gather(x, batch), tf.gather(y, batch)
            seed = tf.stack([seeds[0], starts[0] + tf.cast(t, tf.int64)])
            shared = {p: p(raw, seed) for p in dict.fromkeys(m.preprocessing for m in members)}
            return [lambda m=m: (shared[m.preprocessing][: m.batch_size], labels[: m.batch_size])
                    for m in members]

        pads = [self._pads(m) for m in members]
        regression = self.data.regression
        own = self.data.head.loss is not None  # the model's own loss, whole batches only

        def member_loss(i: int, batch, sizes) -> tf.Tensor:
            m = members[i]
            inputs, labels = batch()
            with self._choosing(m):
                logits = m.model(inputs, training=True)
            if own:
                loss = loss_fn(labels, logits)
            elif regression:  # the mean squared error over the member's own rows
                per_row = squared_errors(labels, logits)
                loss = (tf.reduce_sum(per_row * tf.cast(
                    tf.range(tf.shape(labels)[0]) < sizes[i], tf.float32))
                    / tf.cast(sizes[i], tf.float32) if pads[i] else tf.reduce_mean(per_row))
            elif pads[i]:  # the mean over the member's own rows; padded rows weigh nothing
                rows = tf.cast(tf.range(tf.shape(labels)[0]) < sizes[i], tf.float32)
                per_row = keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                       from_logits=True)
                loss = tf.reduce_sum(per_row * rows) / tf.cast(sizes[i], tf.float32)
            else:
                loss = loss_fn(labels, logits)
            # Regularizers' and add_loss terms of this call, which Keras's fit adds too.
            extra = [tf.reduce_sum(tf.cast(t, loss.dtype)) for t in m.model.losses]
            return tf.add_n([loss, *extra]) if extra else loss

        def member_step(i: int, batch, sizes) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = member_loss(i, batch, sizes)
            apply_gradients(members[i].optimizer, tape.gradient(loss, variables[i]),
                            variables[i], rates[i])
            return loss

        def joint_step(batches, sizes, active=None):
            """One step of every member, in one graph.

            With ``active`` (a boolean per member), a member whose budget is spent skips the
            step (``tf.cond``): nothing of it runs, so its weights, BatchNorm statistics and
            optimizer state stay as they are, bit for bit.
            """
            if active is None:
                return tf.stack([member_step(i, b, sizes) for i, b in enumerate(batches)])
            return tf.stack([tf.cond(active[i], lambda i=i, b=b: member_step(i, b, sizes),
                                     lambda: tf.constant(0.0))
                             for i, b in enumerate(batches)])

        def train_chunk(idxs, ks, starts, seeds, sizes, *block):
            xs, ys = block if streamed else (x, y)

            def body(t, sums):
                batches = member_batches(idxs, starts, seeds, t, xs, ys)
                losses = (joint_step(batches, sizes, t < ks) if masked
                          else joint_step(batches, sizes))
                return t + 1, sums + losses

            # An explicit while_loop: autograph would otherwise convert every function the
            # step calls, Keras included, which is most of the tracing time.
            _, sums = tf.while_loop(lambda t, _: t < tf.reduce_max(ks), body,
                                    (tf.constant(0), tf.zeros([len(members)])))
            return sums / tf.cast(tf.maximum(ks, 1), tf.float32)

        streams = [_leader(members)] if sliced else members
        signature = (
            # Slices are cut at traced sizes; gathered batches take any size.
            tuple(tf.TensorSpec([None, m.batch_size if sliced else None], tf.int32)
                  for m in streams),
            tf.TensorSpec([len(members)], tf.int32),
            tf.TensorSpec([len(streams)], tf.int64),
            tf.TensorSpec([len(streams)], tf.int64),
            tf.TensorSpec([len(members)], tf.int32),
        )
        block = ()
        if streamed:
            labels = self.data.label_dtype
            signature += (self.data.example_spec, tf.TensorSpec([None], labels))
            block = (tf.zeros([1, *self.data.example_spec.shape[1:]],
                              self.data.example_spec.dtype),
                     tf.zeros([1], labels))
        fn = tf.function(train_chunk, input_signature=signature, jit_compile=self.jit_compile,
                         autograph=False)
        width = self.chunk_steps if self.jit_compile else 1
        fn(tuple(tf.zeros([width, self.batch_bucket if self._pads(m) else m.batch_size],
                          tf.int32) for m in streams),
           tf.zeros([len(members)], tf.int32), tf.zeros([len(streams)], tf.int64),
           tf.zeros([len(streams)], tf.int64), tf.constant([m.batch_size for m in members]),
           *block)
        return fn

    def _choosing(self, member: Member) -> Any:
        """Where XLA does not compile the step, the member's runtime activation runs only the
        chosen function (``choosing``); XLA takes the select."""
        return contextlib.nullcontext() if self.jit_compile else choosing(member.model)


def _leader(group: list[Member]) -> Member:
    """The member whose batch size and data order the shared stream follows."""
    return max(group, key=lambda m: m.batch_size)
