"""Looped packs: members of one architecture trained by one program that holds one model.

The program loops over the pack's members (``tf.while_loop``) and, for each, over its own
steps, calling the architecture's template model statelessly (``stateless_call``) on the
member's own weights and applying its own update rule to its own slots, as
``optimizers.apply_gradients`` joins them. Everything that differs between members is an
input (weights, slots, batch size, learning rate and schedule, update rule, activation,
data order, seeds), so one traced program serves every pack of the architecture, of any
size, and its trace costs one model's, however many members a pack holds.

Each member runs the operations it would run alone, on its own numbers: packed, alone,
fresh or on a reused program, it ends bit for bit the same. ``program_for`` keeps an
architecture's programs (``ArchitectureProgram``) in ``PROGRAMS``, keyed by
``architecture_key``; ``looped_state`` stacks the members' state for them and writes it back.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import keras
import numpy as np
import tensorflow as tf

from packexp import optim
from packexp.models.activation import choosing
from packexp.models.stand_in import stand_in_of
from packexp.packing.data import DeviceData, Preprocessing
from packexp.packing.looped_state import LoopedState, architecture_key, stack_members, write_members
from packexp.packing.member import Member
from packexp.packing.optimizers import RuleOptimizer, general_update, group_rates, scaled_delta
from packexp.packing.schedules import fraction, profile
from packexp.packing.stats import PackStats, account
from packexp.packing.targets import error_sums, squared_errors
from packexp.space.options import LR_SCHEDULES

# Programs kept in this process, least recently used dropped first.
KEEP = 8


class ArchitectureProgram:
    """The training and evaluation programs of one architecture, for packs of any size.

    Args:
        template: A member of the architecture; its model is called statelessly, so its own
            weights are never read or written by the programs.
        data: The device data whose shapes the programs take.
    """

    def __init__(self, template: Member, data: DeviceData) -> None:
        self.model = template.model
        self.preprocessing: Preprocessing = template.preprocessing
        optimizer: RuleOptimizer = template.optimizer  # type: ignore[assignment]
        self.groups = [list(g) for g in optimizer._groups]
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.regression = data.regression
        weights = self.model.trainable_variables
        self._shapes = [tuple(v.shape) for v in weights]
        self._sizes = [int(np.prod(s)) for s in self._shapes]
        stand_in = stand_in_of(self.model)
        self._rates = group_rates(self.groups, self._sizes, stand_in and stand_in.rates)
        x = data.x_train
        stacked = [tf.TensorSpec([None, *v.shape], v.dtype) for v in weights]
        frozen = [tf.TensorSpec([None, *v.shape], v.dtype)
                  for v in self.model.non_trainable_variables]
        slots = [tf.TensorSpec([None, sum(self._sizes[i] for i in g)], tf.float32)
                 for g in self.groups]
        self._arrays_spec = (tuple(stacked), tuple(frozen), tuple(slots), tuple(slots),
                             tf.TensorSpec([None], tf.int64))
        hparams_spec = {"sizes": tf.TensorSpec([None], tf.int32),
                        "lr": tf.TensorSpec([None], tf.float32),
                        "horizon": tf.TensorSpec([None], tf.float32),
                        "schedule": tf.TensorSpec([None], tf.int32),
                        "coefficients": tf.TensorSpec([None, len(optim.FIELDS)], tf.float32),
                        "choice": tf.TensorSpec([None], tf.int32)}
        data_spec = (tf.TensorSpec([None, *x.shape[1:]], x.dtype),
                     tf.TensorSpec([None], data.y_train.dtype))
        self.train = tf.function(self._train_chunk, autograph=False, input_signature=(
            *data_spec, tf.TensorSpec([None, None, None], tf.int32),
            tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.int64), hparams_spec, self._arrays_spec))
        self.evaluate = tf.function(self._evaluate, autograph=False, input_signature=(
            tf.TensorSpec([None, *data.x_val.shape[1:]], data.x_val.dtype),
            tf.TensorSpec([None], data.y_val.dtype), self._arrays_spec[0],
            self._arrays_spec[1], tf.TensorSpec([None], tf.int32)))
        self.trace_s = 0.0
        self.eval_trace_s = 0.0
        self.eval_traced = False
        # Whether a pack's record counted the program yet: the first pack to run it does,
        # though a memory probe may have traced it (its time is then the probe's).
        self.reported = False

    # -- training --------------------------------------------------------------------------

    def warm_up(self, data: DeviceData, state: LoopedState) -> float:
        """Traces and runs the training program once with no step; returns the seconds."""
        t0 = time.perf_counter()
        n = int(state.iterations.shape[0])
        self.train(data.x_train, data.y_train, tf.zeros([n, 1, 1], tf.int32),
                   tf.zeros([n], tf.int32), tf.zeros([n], tf.int64), tf.zeros([n], tf.int64),
                   state.hparams, state.arrays())
        self.trace_s = time.perf_counter() - t0
        return self.trace_s

    def _train_chunk(self, x_all, y_all, idxs, ks, starts, seeds, hparams, arrays):
        """Trains member i ``ks[i]`` steps on batches ``idxs[i, :ks[i], :sizes[i]]``;
        returns each member's mean loss and the new arrays."""
        n = tf.shape(ks)[0]
        outputs = tf.nest.map_structure(
            lambda t: tf.TensorArray(t.dtype, size=n, element_shape=t.shape[1:]), arrays)
        losses = tf.TensorArray(tf.float32, size=n, element_shape=[])

        def member(i, losses, outputs):
            own = tf.nest.map_structure(lambda t: t[i], arrays)
            hp = {k: v[i] for k, v in hparams.items()}

            def step(t, total, own):
                batch = idxs[i, t, : hp["sizes"]]
                seed = tf.stack([seeds[i], starts[i] + tf.cast(t, tf.int64)])
                x = self.preprocessing(tf.gather(x_all, batch), seed)
                loss, own = self._step(own, x, tf.gather(y_all, batch), hp)
                return t + 1, total + loss, own

            _, total, own = tf.while_loop(lambda t, *_: t < ks[i], step,
                                          (tf.constant(0), tf.constant(0.0), own))
            losses = losses.write(i, total / tf.cast(tf.maximum(ks[i], 1), tf.float32))
            outputs = tf.nest.map_structure(lambda ta, t: ta.write(i, t), outputs, own)
            return i + 1, losses, outputs

        _, losses, outputs = tf.while_loop(lambda i, *_: i < n, member,
                                           (tf.constant(0), losses, outputs))
        return losses.stack(), tf.nest.map_structure(lambda ta: ta.stack(), outputs)

    def _step(self, own, x, y, hp):
        """One step of one member: what ``Pack``'s plain step and ``apply_gradients`` do,
        on tensors instead of variables."""
        weights, frozen, m_slots, v_slots, iterations = own
        weights = list(weights)
        with choosing(self.model, hp["choice"]), tf.GradientTape() as tape:
            tape.watch(weights)
            logits, frozen, extra = self.model.stateless_call(
                weights, list(frozen), x, training=True, return_losses=True)
            loss = (tf.reduce_mean(squared_errors(y, logits)) if self.regression
                    else self._loss(y, logits))
            extra = [tf.reduce_sum(tf.cast(t, loss.dtype)) for t in extra]
            loss = tf.add_n([loss, *extra]) if extra else loss
        grads = tape.gradient(loss, weights)
        coefficients = dict(zip(optim.FIELDS, tf.unstack(hp["coefficients"]), strict=True))
        lr = hp["lr"] * self._profile(hp["schedule"], fraction(iterations, hp["horizon"]))
        step = tf.cast(iterations + 1, tf.float32)
        new_m, new_v = [], []
        for group, m, v, rated in zip(self.groups, m_slots, v_slots, self._rates, strict=True):
            g = (tf.reshape(grads[group[0]], [-1]) if len(group) == 1 else
                 tf.concat([tf.reshape(grads[i], [-1]) for i in group], axis=0))
            delta, m, v = general_update(g, m, v, coefficients, lr, step)
            delta = scaled_delta(delta, rated, coefficients)
            new_m.append(m)
            new_v.append(v)
            deltas = ([delta] if len(group) == 1 else
                      tf.split(delta, [self._sizes[i] for i in group]))
            for i, d in zip(group, deltas, strict=True):
                weights[i] = weights[i] - tf.reshape(d, self._shapes[i])
        return loss, (tuple(weights), tuple(frozen), tuple(new_m), tuple(new_v),
                      iterations + 1)

    @staticmethod
    def _profile(schedule: tf.Tensor, z: tf.Tensor) -> tf.Tensor:
        """The member's learning-rate profile at ``z``: each computed as Keras's schedule
        computes it, the member's selected."""
        out = profile(LR_SCHEDULES[0], z)
        for k, name in enumerate(LR_SCHEDULES[1:], start=1):
            out = tf.where(tf.equal(schedule, k), profile(name, z), out)
        return out

    # -- evaluation ------------------------------------------------------------------------

    def _evaluate(self, x, y, weights, frozen, choice):
        """Each member's correct predictions and summed loss on ``x``: as ``Pack``'s."""
        n = tf.shape(choice)[0]
        x = self.preprocessing.evaluation(x)

        def member(i, correct, losses):
            with choosing(self.model, choice[i]):
                logits, _ = self.model.stateless_call([w[i] for w in weights],
                                                      [f[i] for f in frozen], x, training=False)
            if self.regression:  # its squared and absolute errors summed
                squared, absolute = error_sums(y, logits)
                return i + 1, correct.write(i, squared), losses.write(i, absolute)
            pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct = correct.write(i, tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.float32)))
            per_example = keras.losses.sparse_categorical_crossentropy(y, logits,
                                                                       from_logits=True)
            return i + 1, correct, losses.write(i, tf.reduce_sum(per_example))

        empty = tf.TensorArray(tf.float32, size=n, element_shape=[])
        _, correct, losses = tf.while_loop(lambda i, *_: i < n, member,
                                           (tf.constant(0), empty, empty))
        return correct.stack(), losses.stack()

    def trace_eval(self) -> bool:
        """Traces the evaluation program if it is not yet; returns whether it traced."""
        if self.eval_traced:
            return False
        t0 = time.perf_counter()
        self.evaluate.get_concrete_function()
        self.eval_trace_s = time.perf_counter() - t0
        self.eval_traced = True
        return True


PROGRAMS: OrderedDict[tuple, ArchitectureProgram] = OrderedDict()


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Programs first run within it (by a memory probe) are counted by the
    search's first pack that runs them; their time stays where it was spent."""
    counted = {id(p) for p in PROGRAMS.values() if p.reported}
    try:
        yield
    finally:
        for program in PROGRAMS.values():
            if id(program) not in counted:
                program.reported = False


def program_for(members: Sequence[Member], data: DeviceData) -> tuple[ArchitectureProgram, bool]:
    """The kept program of the members' architecture, or a new one; and whether it is new.

    Keyed by ``architecture_key``, the preprocessing and the data's shapes: a kept program
    that does not match is never used."""
    template = members[0]
    key = (architecture_key(template.model), template.preprocessing,
           tuple(data.x_train.shape[1:]), str(data.x_train.dtype), data.regression,
           tuple(tuple(g) for g in template.optimizer._groups))
    program = PROGRAMS.get(key)
    if program is not None:
        PROGRAMS.move_to_end(key)
        return program, False
    program = PROGRAMS[key] = ArchitectureProgram(template, data)
    while len(PROGRAMS) > KEEP:
        PROGRAMS.popitem(last=False)
    return program, True


def train_looped(members: Sequence[Member], data: DeviceData, state: LoopedState | None,
                 remaining: dict[str, int], chunk_steps: int) -> tuple[PackStats, LoopedState]:
    """Trains a looped pack's members their ``remaining`` steps, ``chunk_steps`` per call of
    the architecture's program; returns what it measured and the members' stacked state
    (``state``: the one the pack ended its last call with, None to stack the members')."""
    program, new = program_for(members, data)
    state = state or stack_members(members)
    stats = PackStats(members=sum(not m.idle for m in members), looped=True)
    if new:
        stats.trace_s = program.warm_up(data, state)
    if not program.reported:
        stats.programs, program.reported = 1, True
    x, y = data.x_train, data.y_train
    starts = np.zeros(len(members), np.int64)
    seeds = tf.constant([m.trial.seed for m in members], tf.int64)
    batch = max(m.batch_size for m in members)
    while True:
        ks = [min(remaining[m.trial_id], chunk_steps) if not m.failed else 0 for m in members]
        n = max(ks)
        if n == 0:
            break
        idxs = np.zeros((len(members), n, batch), np.int32)
        for i, (m, k) in enumerate(zip(members, ks, strict=True)):
            starts[i] = m.step
            if k:
                idxs[i, :k, : m.batch_size] = m.next_batches(k)
        t0 = time.perf_counter()
        losses, arrays = program.train(x, y, tf.constant(idxs), tf.constant(ks, tf.int32),
                                       tf.constant(starts), seeds, state.hparams,
                                       state.arrays())
        mean_losses = losses.numpy()
        elapsed = time.perf_counter() - t0
        state = LoopedState(*arrays, hparams=state.hparams)
        stats.steps += n
        stats.train_s += elapsed
        stats.chunk_step_ms.append(1000 * elapsed / n)
        account(list(members), ks, mean_losses, remaining)
    write_members(members, state)
    return stats, state


def looped_evaluator(members: Sequence[Member], data: DeviceData,
                     state: LoopedState | None) -> tuple[Callable, bool]:
    """A looped pack's evaluation of a validation batch (each member's correct count and
    loss sum) and whether its program was traced for it."""
    program, _ = program_for(members, data)
    state = state or stack_members(members)
    traced = program.trace_eval()

    def fn(x, y):
        return tuple(t.numpy() for t in program.evaluate(
            x, y, state.weights, state.frozen, state.hparams["choice"]))

    return fn, traced


class LoopedProgram:
    """The looped program (``space.options.LOOPED``): one model of the architecture run once
    per member inside one program, the members' state stacked (``LoopedState``) and carried
    from one training call to the next. Bit for bit what each member gets trained alone."""

    def __init__(self, members: Sequence[Member], data: DeviceData, chunk_steps: int) -> None:
        self.members = members
        self.data = data
        self.chunk_steps = chunk_steps
        self._state: LoopedState | None = None  # the members' state as last trained

    def reload(self) -> None:
        self._state = None  # stacked again from the members' new state

    def evaluator(self) -> tuple[Callable, bool]:
        return looped_evaluator(self.members, self.data, self._state)

    def train(self, remaining: dict[str, int]) -> PackStats:
        stats, self._state = train_looped(self.members, self.data, self._state, remaining,
                                          self.chunk_steps)
        return stats
