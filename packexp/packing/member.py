"""One trial inside a pack: its own model, optimizer, batch size and step counter."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np
from keras.src.backend.common import global_state
from keras.src.random import seed_generator
from keras.src.utils import rng_utils

from packexp.files import naming
from packexp.models.activation import set_activation
from packexp.optim import coefficients
from packexp.packing.data import Preprocessing, batch_indices
from packexp.packing.initial import state_variables
from packexp.packing.optimizers import RuleOptimizer, make_optimizer, rule_options
from packexp.packing.schedules import base_learning_rate, schedule_of, set_horizon
from packexp.space import Trial
from packexp.space.options import steps_for

IDLE = "idle-"  # the trial ids of a pack's idle seats begin so

ModelBuilder = Callable[[Sequence[int], int, Mapping[str, Any]], keras.Model]


def seed_keras(seed: int) -> None:
    """Seeds what Keras draws initial weights from, as ``keras.utils.set_random_seed`` does,
    but leaves TensorFlow's global seed alone.

    Keras draws its initializers' seeds from Python's ``random`` and runs stateless ops, so
    the weights are the same. ``tf.random.set_seed`` would clear TensorFlow's kernel cache,
    and every step function kept for reuse would be instantiated again on its next call
    (about 60 ms each for mlp3 on a 2-core CPU).
    """
    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


@dataclass(frozen=True)
class MemberState:
    """A member's training state in host memory: what a checkpoint holds.

    ``weights`` are the model's ``state_variables`` (its weights, then its seed generators'
    states); ``slots`` are the optimizer's variables (its step counter and learning rate
    included), in ``optimizer.variables`` order. ``fresh_slots``: the loading member's
    update rule starts afresh instead (a population's member that copied a donor of
    another rule, as a new optimizer would): the slots only say how many there are.
    """

    weights: tuple[np.ndarray, ...]
    slots: tuple[np.ndarray, ...]
    step: int
    fresh_slots: bool = False


@dataclass(eq=False)
class Member:
    """A trial's training state; ``step`` counts the batches it has trained on."""

    trial: Trial
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    batch_size: int
    train_size: int
    step: int = 0
    failed: bool = False
    train_loss: float | None = None  # the mean loss of its last chunk of steps
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    # Its losses summed over the steps trained since it was loaded, and those steps.
    loss_sum: float = 0.0
    loss_steps: int = 0

    @property
    def mean_loss(self) -> float | None:
        """Its mean training loss over every step since it was loaded (a stretch of
        training, as ``train_group`` runs it); None before any."""
        return self.loss_sum / self.loss_steps if self.loss_steps else None

    @classmethod
    def create(
        cls,
        trial: Trial,
        build_model: ModelBuilder,
        input_shape: Sequence[int],
        num_classes: int,
        train_size: int,
        preprocessing: Preprocessing | None = None,
    ) -> Member:
        """Builds the trial's model and optimizer with weights seeded by the trial alone."""
        batch_size = trial.batch_size
        if not 1 <= batch_size <= train_size:
            raise ValueError(
                f"batch_size={batch_size}: must be between 1 and the {train_size} training examples"
            )
        seed_keras(trial.seed)
        model = build_model(input_shape, num_classes, trial.hparams)
        optimizer = make_optimizer(trial.optimizer, trial.learning_rate, trial.hparams)
        optimizer.build(model.trainable_variables)
        return cls(trial, model, optimizer, batch_size, train_size,
                   preprocessing=preprocessing or Preprocessing())

    @property
    def trial_id(self) -> str:
        return self.trial.trial_id

    @property
    def idle(self) -> bool:
        """An idle seat of a pack (``PackCache``): it trains and reports nothing."""
        return self.trial.trial_id.startswith(IDLE)

    def idle_as(self, trial: Trial) -> Member:
        """Makes this member the idle seat ``trial``, keeping whatever state it holds."""
        self.trial, self.step, self.failed, self.train_loss = trial, 0, False, None
        self.loss_sum, self.loss_steps = 0.0, 0
        return self

    @property
    def steps_per_epoch(self) -> int:
        return self.train_size // self.batch_size

    def steps_for(self, epochs: float) -> int:
        """Total steps that ``epochs`` epochs amount to (at least one)."""
        return steps_for(epochs, self.batch_size, self.train_size)

    def set_lr_horizon(self, epochs: float) -> None:
        """Ends the member's learning-rate schedule, if it has one, at ``epochs`` epochs.

        A schedule's horizon is a variable of the member's optimizer, set before each
        training stretch; until then it is one step."""
        set_horizon(self.optimizer, self.steps_for(epochs))

    def state(self) -> MemberState:
        """A copy of the member's weights, optimizer state and step counter."""
        return MemberState(tuple(v.numpy() for v in state_variables(self.model)),
                           tuple(v.numpy() for v in self.optimizer.variables), self.step)

    def load(self, trial: Trial, state: MemberState, preprocessing: Preprocessing) -> Member:
        """Makes this member ``trial``, in ``state``: its model and optimizer are reused.

        The model and optimizer must be of the structure ``state`` came from (the same
        architecture). What is runtime data rather than structure, the (base) learning rate,
        a ``RuleOptimizer``'s rule and a ``SelectActivation``'s choice, is set from
        ``trial``: the state of a trial's own last rung has them already, and a population's
        member that copies another's state (``scheduler=pbt``) trains on with its own.
        """
        for variables, values in ((state_variables(self.model), state.weights),
                                  (self.optimizer.variables, state.slots)):
            if len(variables) != len(values):
                raise ValueError(f"state of {trial.trial_id} does not fit member "
                                 f"{self.trial_id}'s model and optimizer")
            for v, value in zip(variables, values, strict=True):
                v.assign(value)
        base_learning_rate(self.optimizer).assign(trial.learning_rate)
        ruled = rule_options(trial.hparams)
        if ruled is not None and isinstance(self.optimizer, RuleOptimizer):
            # Kept members serve trials of any rule.
            self.optimizer.configure(*ruled, fresh=state.fresh_slots)
            if state.fresh_slots:
                self.optimizer.iterations.assign(0)
        set_activation(self.model, trial.hparams)
        self.trial = trial
        self.batch_size = trial.batch_size
        self.step = state.step
        self.failed = False
        self.train_loss = None
        self.loss_sum, self.loss_steps = 0.0, 0
        self.preprocessing = preprocessing
        return self

    def put_state(self, state: MemberState) -> None:
        """Takes ``state`` (of this member's trial, as a looped pack leaves it)."""
        for variables, values in ((state_variables(self.model), state.weights),
                                  (self.optimizer.variables, state.slots)):
            for v, value in zip(variables, values, strict=True):
                v.assign(value)

    def save(self, directory: str | Path) -> str:
        """Writes a checkpoint of weights, optimizer slots and step counter (``write_state``).

        Returns:
            The checkpoint path, for ``restore``.
        """
        return write_state(self.state(), Path(directory) / self.trial_id)

    def restore(self, path: str) -> Member:
        """Loads a checkpoint written by ``save`` of the same trial into this member."""
        return self.load(self.trial, read_state(path), self.preprocessing)

    def next_batches(self, steps: int) -> np.ndarray:
        return batch_indices(self.trial.seed, self.train_size, self.batch_size, self.step, steps)


class HeldMember(Member):
    """A member whose state is held in host memory, on the model and optimizer of its
    structure's template, which it never reads or writes: a looped pack runs it from its
    state (``packing.looped``), so no Keras model of its own is built.

    Its hyper-parameters that a real member keeps in variables (its update rule's
    coefficients, a schedule's horizon) are set in the held state, as a real member's
    variables would have them.
    """

    held: MemberState | None = None

    @classmethod
    def on(cls, template: Member, trial: Trial, state: MemberState,
           preprocessing: Preprocessing) -> HeldMember:
        member = cls(trial, template.model, template.optimizer, trial.batch_size,
                     template.train_size)
        return member.load(trial, state, preprocessing)

    def state(self) -> MemberState:
        assert self.held is not None
        return MemberState(self.held.weights, self.held.slots, self.step)

    def put_state(self, state: MemberState) -> None:
        self.held = state

    def load(self, trial: Trial, state: MemberState, preprocessing: Preprocessing) -> Member:
        slots = list(state.slots)
        variables = self.optimizer.variables
        if len(state.weights) != len(state_variables(self.model)) or len(slots) != len(variables):
            raise ValueError(f"state of {trial.trial_id} does not fit member "
                             f"{self.trial_id}'s model and optimizer")
        lr = next((i for i, v in enumerate(variables)
                   if v is base_learning_rate(self.optimizer)), None)
        if lr is not None:
            slots[lr] = np.asarray(trial.learning_rate, slots[lr].dtype)
        ruled = rule_options(trial.hparams)
        if ruled is not None and isinstance(self.optimizer, RuleOptimizer):
            i = next(i for i, v in enumerate(variables) if v is self.optimizer.coefficients)
            slots[i] = np.asarray(coefficients(*ruled).values(), np.float32)
            if state.fresh_slots:
                slots = list(self.optimizer.fresh_slots(*ruled, trial.learning_rate))
        self.held = MemberState(tuple(state.weights), tuple(slots), state.step)
        self.trial = trial
        self.batch_size = trial.batch_size
        self.step = state.step
        self.failed = False
        self.train_loss = None
        self.loss_sum, self.loss_steps = 0.0, 0
        self.preprocessing = preprocessing
        return self

    def set_lr_horizon(self, epochs: float) -> None:
        schedule = schedule_of(self.optimizer)
        if schedule is None or self.held is None:
            return
        i = next(i for i, v in enumerate(self.optimizer.variables) if v is schedule.horizon)
        slots = list(self.held.slots)
        slots[i] = np.asarray(float(max(1, self.steps_for(epochs))), np.float32)
        self.held = MemberState(self.held.weights, tuple(slots), self.held.step)



CHECKPOINT_SUFFIX = ".npz"  # a member's state file: NumPy's archive


def write_state(state: MemberState, path: str | Path) -> str:
    """Writes ``state`` durably: a reader finds the whole file or none (fsync, then rename).

    Returns:
        The file written, ``path`` with ``.npz``.
    """
    final = Path(path).with_suffix(CHECKPOINT_SUFFIX)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp")
    arrays = {f"w{i}": w for i, w in enumerate(state.weights)}
    arrays.update({f"s{i}": v for i, v in enumerate(state.slots)})
    try:
        with naming(final), open(tmp, "wb") as f:
            np.savez(f, step=np.int64(state.step), fresh=np.bool_(state.fresh_slots), **arrays)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    os.replace(tmp, final)
    return str(final)


def read_state(path: str | Path) -> MemberState:
    """The state ``write_state`` wrote to ``path``."""
    with np.load(path) as f:
        count = {k: sum(1 for name in f.files if name[0] == k and name[1:].isdigit())
                 for k in "ws"}
        return MemberState(tuple(f[f"w{i}"] for i in range(count["w"])),
                           tuple(f[f"s{i}"] for i in range(count["s"])), int(f["step"]),
                           "fresh" in f.files and bool(f["fresh"]))
