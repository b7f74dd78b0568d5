"""N members trained jointly in one TensorFlow step function."""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from packexp.packing.data import DeviceData, preprocess
from packexp.packing.member import Member

log = logging.getLogger(__name__)


@dataclass
class PackStats:
    """What one ``Pack.train`` call measured."""

    members: int
    steps: int = 0
    train_s: float = 0.0
    build_s: float = 0.0
    switches: int = 0
    switch_overhead_s: float = 0.0
    chunk_step_ms: list[float] = field(default_factory=list)

    @property
    def step_time_ms(self) -> float | None:
        """Median time of one pack step over the chunks run."""
        return statistics.median(self.chunk_step_ms) if self.chunk_step_ms else None


@dataclass(frozen=True)
class Evaluation:
    val_accuracy: float | None
    val_loss: float | None


class Pack:
    """Members trained jointly: one forward and one backward pass per step, one tape.

    Each member gathers its own batch from the shared device copy of the data, by its own
    seeded order, so its updates are exactly those it would get alone. The losses are
    summed under one tape; since members share no parameters, each member's gradient is
    that of its own loss.

    Members with different step budgets run together until the first one is done; it then
    leaves and the step function is rebuilt for the rest. That rebuild is the switching
    overhead the paper measures.
    """

    def __init__(
        self,
        members: Sequence[Member],
        data: DeviceData,
        *,
        xla: bool = False,
        chunk_steps: int = 500,
        eval_batch_size: int = 1024,
    ) -> None:
        if not members:
            raise ValueError("a pack needs at least one member")
        self.members = list(members)
        self.data = data
        self.xla = xla
        self.chunk_steps = chunk_steps
        self.eval_batch_size = eval_batch_size
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train(self, steps: Mapping[str, int]) -> PackStats:
        """Trains each member for its own number of further steps.

        Args:
            steps: trial_id to the number of steps to train it for.

        Returns:
            Timings: build time, switching overhead and the median pack step time.
        """
        remaining = {m.trial_id: int(steps[m.trial_id]) for m in self.members}
        stats = PackStats(members=len(self.members))
        active = [m for m in self.members if remaining[m.trial_id] > 0 and not m.failed]
        first = True
        while active:
            t0 = time.perf_counter()
            fn = self._compile_train(active)
            built = time.perf_counter() - t0
            if first:
                stats.build_s += built
                first = False
            else:
                stats.switches += 1
                stats.switch_overhead_s += built
            k = min(min(remaining[m.trial_id] for m in active), self.chunk_steps)
            while k > 0:
                mean_losses = self._run_chunk(fn, active, k, stats)
                for m, loss in zip(active, mean_losses, strict=True):
                    m.step += k
                    remaining[m.trial_id] -= k
                    m.train_loss = float(loss)
                    m.history.append(float(loss))
                    if not math.isfinite(loss):
                        m.failed = True
                        log.info("member %s diverged (loss %s); it leaves the pack",
                                 m.trial_id, loss)
                if any(m.failed or remaining[m.trial_id] == 0 for m in active):
                    break
                k = min(min(remaining[m.trial_id] for m in active), self.chunk_steps)
            active = [m for m in active if remaining[m.trial_id] > 0 and not m.failed]
        return stats

    def evaluate(self) -> dict[str, Evaluation]:
        """Each member's validation accuracy and loss; None for failed members."""
        live = [m for m in self.members if not m.failed]
        out = {m.trial_id: Evaluation(None, None) for m in self.members if m.failed}
        if not live:
            return out
        fn = self._eval_fn(live)
        correct = np.zeros(len(live))
        loss_sum = np.zeros(len(live))
        n = self.data.val_size
        for lo in range(0, n, self.eval_batch_size):
            c, s = fn(self.data.x_val[lo : lo + self.eval_batch_size],
                      self.data.y_val[lo : lo + self.eval_batch_size])
            correct += c.numpy()
            loss_sum += s.numpy()
        for m, c, s in zip(live, correct, loss_sum, strict=True):
            loss = s / n
            ok = math.isfinite(loss)
            out[m.trial_id] = Evaluation(float(c / n) if ok else None, float(loss) if ok else None)
        return out

    def free(self, trial_id: str) -> Member:
        """Takes a member out of the pack."""
        member = next(m for m in self.members if m.trial_id == trial_id)
        self.members.remove(member)
        return member

    def _run_chunk(self, fn, active: list[Member], k: int, stats: PackStats) -> np.ndarray:
        width = self.chunk_steps if self.xla else k  # a fixed shape spares XLA a recompile
        idxs = []
        for m in active:
            batches = m.next_batches(k)
            if width > k:
                batches = np.concatenate([batches, np.zeros((width - k, m.batch_size), np.int32)])
            idxs.append(tf.constant(batches))
        t0 = time.perf_counter()
        mean_losses = fn(tuple(idxs), tf.constant(k, tf.int32)).numpy()
        elapsed = time.perf_counter() - t0
        stats.steps += k
        stats.train_s += elapsed
        stats.chunk_step_ms.append(1000 * elapsed / k)
        return mean_losses

    def _compile_train(self, members: list[Member]):
        """Traces and warms up the step function of ``members`` (zero steps, no update)."""
        x, y, loss_fn = self.data.x_train, self.data.y_train, self._loss
        variables = [m.model.trainable_variables for m in members]
        flat = [v for vs in variables for v in vs]

        def train_chunk(idxs, n):
            sums = tf.zeros([len(members)])
            for t in tf.range(n):
                with tf.GradientTape() as tape:
                    losses = []
                    for m, idx in zip(members, idxs, strict=True):
                        batch = idx[t]
                        logits = m.model(preprocess(tf.gather(x, batch)), training=True)
                        losses.append(loss_fn(tf.gather(y, batch), logits))
                    total = tf.add_n(losses)
                grads = tape.gradient(total, flat)
                offset = 0
                for m, vs in zip(members, variables, strict=True):
                    m.optimizer.apply(grads[offset : offset + len(vs)], vs)
                    offset += len(vs)
                sums += tf.stack(losses)
            return sums / tf.cast(tf.maximum(n, 1), tf.float32)

        signature = (
            tuple(tf.TensorSpec([None, m.batch_size], tf.int32) for m in members),
            tf.TensorSpec([], tf.int32),
        )
        fn = tf.function(train_chunk, input_signature=signature, jit_compile=self.xla)
        width = self.chunk_steps if self.xla else 1
        fn(tuple(tf.zeros([width, m.batch_size], tf.int32) for m in members),
           tf.constant(0, tf.int32))
        return fn

    def _eval_fn(self, members: list[Member]):
        def evaluate(x, y):
            correct, losses = [], []
            for m in members:
                logits = m.model(preprocess(x), training=False)
                pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
                correct.append(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.float32)))
                per_example = keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)
                losses.append(tf.reduce_sum(per_example))
            return tf.stack(correct), tf.stack(losses)

        x_spec = tf.TensorSpec([None, *self.data.x_val.shape[1:]], self.data.x_val.dtype)
        return tf.function(evaluate, input_signature=(x_spec, tf.TensorSpec([None], tf.int32)))
