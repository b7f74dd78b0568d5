"""N members trained jointly in one TensorFlow step function."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.models.activation import choosing
from packexp.pack_options import (
    FUSED,
    LOOPED,
    PACK_DEFAULTS,
    SINGLE,
    PackSettings,
    Program,
    choose_program,
    compiles,
)
from packexp.packing.data import DeviceData, batch_indices
from packexp.packing.fused import FusedPack
from packexp.packing.fused_graph import couples_rows
from packexp.packing.looped import LoopedState, looped_evaluator, train_looped
from packexp.packing.member import Member
from packexp.packing.optimizers import apply_gradients
from packexp.packing.program import MemberFacts
from packexp.packing.stats import Evaluation, PackStats, account

log = logging.getLogger(__name__)


class Pack:
    """Members trained jointly in one compiled step function.

    Each member gathers its own batch from the shared device copy of the data, by its own
    seeded order, so its updates are exactly those it would get alone.

    Every member takes the gradient of its own loss (they share no parameters) and applies
    it with its own optimizer. Misaligned step budgets (smaller batches take more steps per
    epoch) are handled by ``misaligned``:

    - ``mask``: one step function for the whole pack, compiled once. A member whose budget
      is spent skips the step (``tf.cond``), so its weights and optimizer state stay as
      they are, bit for bit, and it costs no compute.
    - ``switch``: the paper's way. When a member's budget is spent it leaves and the step
      function is rebuilt for the rest; the rebuild time is the switching overhead.

    ``data_sharing`` chooses where batches come from:

    - ``gather``: each member gathers its own batch by its own seeded order (isolation).
    - ``slice``: the paper's variant. One stream of batches of the largest batch size, in
      the order of the member with that batch size; each member takes the first rows it
      needs, and each distinct ``Preprocessing`` runs once per step for all who use it.
      Members then see each other's data order, so results depend on pack-mates.

    ``settings`` are the pack settings (``pack_options.PackSettings``), a run's defaults
    unless given: fused and compiled where ``auto`` chooses; ``fusion="off",
    jit_compile=False`` gives the plain pack, traced but not compiled. ``batch_bucket``: the
    search's largest batch size, where compiled members' batches are padded to it.
    """

    def __init__(self, members: Sequence[Member], data: DeviceData,
                 settings: PackSettings = PACK_DEFAULTS, batch_bucket: int | None = None
                 ) -> None:
        if not members:
            raise ValueError("a pack needs at least one member")
        self.settings = settings
        self.members = list(members)
        self.data = data
        self.misaligned = settings.misaligned
        self.data_sharing = settings.data_sharing
        self.fusion = settings.fusion
        self.loop = settings.loop
        self.grouped_conv = settings.grouped_conv
        self._stream_step = 0
        self._facts = MemberFacts(self.members)
        # auto compiles where one program serves the pack to its end: masked (switching
        # rebuilds the step each time a member finishes, an XLA compile each) and gathered
        # batches (sliced ones are cut at traced sizes).
        self.jit_compile = compiles(self.settings, self._facts.convolutional)
        self.chunk_steps = settings.chunk_steps
        self.eval_batch_size = settings.eval_batch_size
        # Under XLA a batch of another size is another compile: members whose rows are
        # independent take batches padded to the bucket (the search's largest batch size),
        # their padded rows masked out of the loss, so one compiled program serves them all.
        self.batch_bucket = batch_bucket
        self._couples_rows: dict[int, bool] = {}
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self._compiled: dict[tuple, Any] = {}
        self._eval_fns: dict[tuple[int, ...], Any] = {}
        self._fused: FusedPack | None = None
        self._program: Program | None = None
        self._looped_state: LoopedState | None = None  # the members' state as last trained
        self.eval_trace_s = 0.0  # the last ``evaluate``'s tracing, when it traced

    def reloaded(self) -> None:
        """Takes in new member states loaded into the same models and optimizers.

        The traced step and evaluation functions read the members' variables (learning
        rates included) and take batch sizes and seeds as inputs, so they stay valid; a
        fused pack re-stacks its members' weights and optimizer state.
        """
        self._stream_step = 0
        self._looped_state = None
        if self._fused is not None:
            self._fused.reload()

    def train(self, steps: Mapping[str, int]) -> PackStats:
        """Trains each member for its own number of further steps.

        Args:
            steps: trial_id to the number of steps to train it for.

        Returns:
            Timings: build time, switching overhead and the median pack step time.
        """
        remaining = {m.trial_id: int(steps.get(m.trial_id, 0)) for m in self.members}
        if self._fusable():
            return self._train_fused(remaining)
        if self.looped:
            return self._train_looped(remaining)
        stats = PackStats(members=self._real, xla=self.jit_compile)
        while True:
            active = [m for m in self.members if remaining[m.trial_id] > 0 and not m.failed]
            if not active:
                return stats
            budgets = {remaining[m.trial_id] for m in active}
            # A compiled pack always runs its masked program: one compile, whatever the budgets.
            if self.misaligned == "switch" or (len(budgets) == 1 and active == self.members
                                               and not self.jit_compile):
                group, masked = active, False
                k = min(min(budgets), self.chunk_steps)
                ks = [k] * len(group)
            else:
                group, masked = self.members, True
                ks = [min(remaining[m.trial_id], self.chunk_steps) if m in active else 0
                      for m in group]
            fn = self._step_fn(group, masked, stats)
            account(group, ks, self._run_chunk(fn, group, ks, stats), remaining)

    @property
    def _real(self) -> int:
        return sum(not m.idle for m in self.members)

    @property
    def fused(self) -> bool:
        """Whether the pack trains as one fused model (``program``)."""
        return self._fusable()

    @property
    def program(self) -> Program:
        """The program the pack trains with (``pack_options.choose_program``), chosen when
        first asked; why it is not fused, or not looped, is logged then."""
        if self._program is None:
            self._program = program = choose_program(self._facts, self.settings)
            if program.kind != FUSED and self.fusion != "off":
                log.log(logging.DEBUG if program.unfused == SINGLE else logging.INFO,
                        "pack of %d trains unfused: %s", len(self.members), program.unfused)
            if (program.kind not in (FUSED, LOOPED) and self.loop != "off"
                    and not program.xla):
                log.info("pack of %d is not looped: %s", len(self.members), program.unlooped)
        return self._program

    def _fusable(self) -> bool:
        return self.program.kind == FUSED

    @property
    def looped(self) -> bool:
        """Whether the pack trains as a loop over its members in one program that holds one
        model (``packing.looped``): plain, uncompiled packs of one architecture."""
        return self.program.kind == LOOPED

    def _train_looped(self, remaining: dict[str, int]) -> PackStats:
        stats, self._looped_state = train_looped(self.members, self.data, self._looped_state,
                                                 remaining, self.chunk_steps)
        return stats

    def _fused_xla(self, steps: int) -> bool:
        """Whether a fused pack compiles with XLA: as the plain pack decides (``auto``: Dense
        models, whose program is compiled once and kept for every later pack)."""
        return self.jit_compile

    def _train_fused(self, remaining: dict[str, int]) -> PackStats:
        xla = self._fused_xla(max(remaining.values()))
        if self._fused is None or self._fused.jit_compile != xla:
            t0 = time.perf_counter()
            self._fused = FusedPack(self.members, self.data, jit_compile=xla,
                                    width=self.chunk_steps if xla else 1,
                                    grouped_conv=self.grouped_conv,
                                    batch=self.batch_bucket if xla else None)
            trace_s, programs = time.perf_counter() - t0, 1
        else:
            trace_s, programs = 0.0, 0
        fused = self._fused
        fused.read_horizons()
        stats = PackStats(members=self._real, fused=True, xla=fused.jit_compile,
                          grouped_conv=fused.grouped_conv, trace_s=trace_s, programs=programs)
        # The bucket (one compiled shape), or the largest batch of the members it now holds.
        batch = fused.bucket or max(m.batch_size for m in self.members)
        while True:
            ks = [min(remaining[m.trial_id], self.chunk_steps) if not m.failed else 0
                  for m in self.members]
            n = max(ks)
            if n == 0:
                break
            width = self.chunk_steps if fused.jit_compile else n  # one shape: one XLA compile
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

    def _pads(self, member: Member) -> bool:
        """Whether ``member`` trains on batches padded to the bucket (XLA, gathered batches,
        rows independent of each other: no BatchNormalization)."""
        if not (self.jit_compile and self.batch_bucket and self.data_sharing == "gather"
                and member.batch_size <= self.batch_bucket):
            return False
        # Per chunk and member: the model's layers are walked once per model, not every call.
        coupled = self._couples_rows.get(id(member.model))
        if coupled is None:
            coupled = self._couples_rows[id(member.model)] = couples_rows(member.model)
        return not coupled

    def evaluate(self) -> dict[str, Evaluation]:
        """Each member's validation accuracy and loss; None for failed members."""
        out = {m.trial_id: Evaluation(None, None) for m in self.members if m.failed}
        t0 = time.perf_counter()
        if self._fused is not None:  # fused state is current: it was written back last
            scored = self.members
            fn = self._fused.evaluate
            traced = self._fused.trace_eval()
        elif self.looped:
            scored = self.members
            fn, traced = looped_evaluator(scored, self.data, self._looped_state)
        else:  # every member, idle and failed ones included: one program for the pack
            scored = self.members
            positions = tuple(range(len(scored)))
            traced = positions not in self._eval_fns
            if traced:
                self._eval_fns[positions] = self._eval_fn(scored)
            plain = self._eval_fns[positions]

            def fn(x, y):
                return tuple(t.numpy() for t in plain(x, y))

        self.eval_trace_s = time.perf_counter() - t0 if traced else 0.0

        n = self.data.val_size
        correct, loss_sum = np.zeros(len(scored)), np.zeros(len(scored))
        for lo in range(0, n, self.eval_batch_size):
            c, s = fn(self.data.x_val[lo : lo + self.eval_batch_size],
                      self.data.y_val[lo : lo + self.eval_batch_size])
            correct += c
            loss_sum += s
        for m, c, s in zip(scored, correct, loss_sum, strict=True):
            if m.failed or m.idle:
                continue
            loss = s / n
            ok = math.isfinite(loss)
            out[m.trial_id] = Evaluation(float(c / n) if ok else None, float(loss) if ok else None)
        return out

    def free(self, trial_id: str, directory: str | Path) -> str:
        """Takes a member out of the pack (the paper's ``free``).

        Returns:
            Its checkpoint (weights, optimizer slots, step counter), for ``load``.
        """
        member = next((m for m in self.members if m.trial_id == trial_id), None)
        if member is None:
            raise KeyError(f"trial {trial_id!r} is not in this pack")
        path = member.save(directory)
        self.members.remove(member)
        self._reset()
        return path

    def load(self, member: Member, checkpoint: str | None = None) -> Member:
        """Adds a member to the pack (the paper's ``load``), restored from ``checkpoint``."""
        if checkpoint is not None:
            member.restore(checkpoint)
        self.members.append(member)
        self._reset()
        return member

    def _reset(self) -> None:
        """Drops compiled steps and fused state after the membership changed."""
        self._compiled.clear()
        self._eval_fns.clear()
        self._fused = None
        self._facts = MemberFacts(self.members)
        self._program = None
        self._looped_state = None

    def _step_fn(self, group: list[Member], masked: bool, stats: PackStats):
        # By position: a reused pack's members are new trials in the same models.
        key = (tuple(self.members.index(m) for m in group), masked)
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
        if self.data_sharing == "slice":
            leader = self._leader(group)
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
        seeds = [m.trial.seed for m in ([self._leader(group)] if self.data_sharing == "slice"
                                        else group)]
        t0 = time.perf_counter()
        sizes = [m.batch_size for m in group]
        mean_losses = fn(idxs, tf.constant(ks, tf.int32), tf.constant(starts, tf.int64),
                         tf.constant(seeds, tf.int64), tf.constant(sizes, tf.int32)).numpy()
        elapsed = time.perf_counter() - t0
        stats.steps += n
        stats.train_s += elapsed
        stats.chunk_step_ms.append(1000 * elapsed / n)
        return mean_losses

    @staticmethod
    def _leader(group: list[Member]) -> Member:
        """The member whose batch size and data order the shared stream follows."""
        return max(group, key=lambda m: m.batch_size)

    def _compile_train(self, members: list[Member], masked: bool):
        """Traces and warms up the step function of ``members`` (zero steps, no update).

        The returned function takes the batch indices ``[steps, batch]`` (one per member, or
        one shared stream when slicing), the steps each member takes ``[members]``, the
        global step each index stream starts at and each stream's seed (for augmentation),
        and returns each member's mean loss. Batch sizes, seeds and learning rates are
        inputs or variables, never traced constants, so a reused pack runs new trials on
        the same function.
        """
        x, y, loss_fn = self.data.x_train, self.data.y_train, self._loss
        variables = [m.model.trainable_variables for m in members]
        sliced = self.data_sharing == "slice"

        def member_batches(idxs, starts, seeds, t):
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

        def member_loss(i: int, batch, sizes) -> tf.Tensor:
            m = members[i]
            inputs, labels = batch()
            with self._choosing(m):
                logits = m.model(inputs, training=True)
            if pads[i]:  # the mean over the member's own rows; padded rows weigh nothing
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
                            variables[i])
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

        def train_chunk(idxs, ks, starts, seeds, sizes):
            def body(t, sums):
                batches = member_batches(idxs, starts, seeds, t)
                losses = (joint_step(batches, sizes, t < ks) if masked
                          else joint_step(batches, sizes))
                return t + 1, sums + losses

            # An explicit while_loop: autograph would otherwise convert every function the
            # step calls, Keras included, which is most of the tracing time.
            _, sums = tf.while_loop(lambda t, _: t < tf.reduce_max(ks), body,
                                    (tf.constant(0), tf.zeros([len(members)])))
            return sums / tf.cast(tf.maximum(ks, 1), tf.float32)

        streams = [self._leader(members)] if sliced else members
        signature = (
            # Slices are cut at traced sizes; gathered batches take any size.
            tuple(tf.TensorSpec([None, m.batch_size if sliced else None], tf.int32)
                  for m in streams),
            tf.TensorSpec([len(members)], tf.int32),
            tf.TensorSpec([len(streams)], tf.int64),
            tf.TensorSpec([len(streams)], tf.int64),
            tf.TensorSpec([len(members)], tf.int32),
        )
        fn = tf.function(train_chunk, input_signature=signature, jit_compile=self.jit_compile,
                         autograph=False)
        width = self.chunk_steps if self.jit_compile else 1
        fn(tuple(tf.zeros([width, self.batch_bucket if self._pads(m) else m.batch_size],
                          tf.int32) for m in streams),
           tf.zeros([len(members)], tf.int32), tf.zeros([len(streams)], tf.int64),
           tf.zeros([len(streams)], tf.int64), tf.constant([m.batch_size for m in members]))
        return fn

    def _choosing(self, member: Member) -> Any:
        """Where XLA does not compile the step, the member's runtime activation runs only the
        chosen function (``choosing``); XLA takes the select."""
        return contextlib.nullcontext() if self.jit_compile else choosing(member.model)

    def _eval_fn(self, members: list[Member]):
        def evaluate(x, y):
            correct, losses = [], []
            for m in members:
                with choosing(m.model):  # never compiled
                    logits = m.model(m.preprocessing.evaluation(x), training=False)
                pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
                correct.append(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.float32)))
                per_example = keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)
                losses.append(tf.reduce_sum(per_example))
            return tf.stack(correct), tf.stack(losses)

        x_spec = tf.TensorSpec([None, *self.data.x_val.shape[1:]], self.data.x_val.dtype)
        fn = tf.function(evaluate, input_signature=(x_spec, tf.TensorSpec([None], tf.int32)),
                         autograph=False)
        return fn.get_concrete_function()
