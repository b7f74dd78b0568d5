"""What a looped program takes of its members: whether they can share one, their
architecture's key, and their state stacked on a member axis and written back."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.models.activation import selectors
from packexp.packing.initial import state_variables
from packexp.packing.member import Member, MemberState
from packexp.packing.optimizers import RuleOptimizer
from packexp.packing.schedules import base_learning_rate, schedule_of
from packexp.space.options import LR_SCHEDULES


def why_unloopable(members: Sequence[Member]) -> str | None:
    """Why ``members`` cannot share one looped program whatever the settings (their update
    rules, weights, architectures or inputs); None when they can
    (``PackFacts.unloopable``)."""
    for m in members:
        if not isinstance(m.optimizer, RuleOptimizer):
            return f"member {m.trial_id}: its optimizer has no update rule (packexp.optim)"
        if any(v.constraint is not None or v.dtype != "float32"
               for v in m.model.trainable_variables):
            return f"member {m.trial_id}: a weight is constrained or not float32"
    if len({architecture_key(m.model) for m in members}) != 1:
        return "members' architectures differ"
    if len({m.preprocessing for m in members}) != 1:
        return "members' preprocessing differs"
    return None


_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def architecture_key(model: keras.Model) -> tuple:
    """What a program traced from ``model`` depends on: every layer's class, configuration
    (names and a selected activation aside) and weight shapes, in order, and the input."""
    key = _KEYS.get(model)
    if key is None:
        layers = []
        for layer in model._flatten_layers(include_self=False):
            if isinstance(layer, keras.Model):  # its layers follow
                continue
            config = {k: v for k, v in layer.get_config().items()
                      if k not in ("name", "selected")}
            layers.append((type(layer).__name__, repr(sorted(config.items())),
                           tuple(tuple(w.shape) for w in layer.weights)))
        key = (tuple(model.inputs[0].shape[1:]), str(model.inputs[0].dtype), tuple(layers))
        _KEYS[model] = key
    return key


@dataclass
class LoopedState:
    """A pack's members' state and hyper-parameters, stacked on a leading member axis."""

    weights: tuple[tf.Tensor, ...]  # each trainable weight [members, *shape]
    frozen: tuple[tf.Tensor, ...]  # each non-trainable one (BatchNorm statistics, seeds)
    m: tuple[tf.Tensor, ...]  # the update rule's first slot per weight group [members, n]
    v: tuple[tf.Tensor, ...]  # and its second
    iterations: tf.Tensor  # [members] int64
    # sizes, lr, horizon, schedule, coefficients and choice, one value per member
    hparams: dict[str, tf.Tensor] = field(default_factory=dict)

    def arrays(self) -> tuple:
        return (self.weights, self.frozen, self.m, self.v, self.iterations)


@dataclass(frozen=True)
class StateLayout:
    """Where a member's state (``MemberState``: ``state_variables`` and the optimizer's
    variables, in order) holds what a looped program takes."""

    trainable: tuple[int, ...]  # of the weights, the model's trainable variables
    frozen: tuple[int, ...]  # and its non-trainable ones
    m: tuple[int, ...]  # of the slots, the update rule's first slot per group
    v: tuple[int, ...]
    iterations: int
    lr: int  # the learning rate, or its schedule's base
    coefficients: int
    horizon: int | None  # a schedule's horizon
    schedule: int  # the schedule's index in LR_SCHEDULES (0: constant)
    choices: tuple[str, ...]  # the model's activations (empty: none to choose)

    @classmethod
    def of(cls, member: Member) -> StateLayout:
        model, opt = member.model, member.optimizer
        weights = {id(v): i for i, v in enumerate(state_variables(model))}
        slots = {id(v): i for i, v in enumerate(opt.variables)}
        schedule = schedule_of(opt)
        layers = selectors(model)
        return cls(tuple(weights[id(v)] for v in model.trainable_variables),
                   tuple(weights[id(v)] for v in model.non_trainable_variables),
                   tuple(slots[id(v)] for v in opt._m), tuple(slots[id(v)] for v in opt._v),
                   slots[id(opt.iterations)], slots[id(base_learning_rate(opt))],
                   slots[id(opt.coefficients)],
                   None if schedule is None else slots[id(schedule.horizon)],
                   0 if schedule is None else LR_SCHEDULES.index(schedule.name),
                   layers[0].choices if layers else ())

    def choice(self, trial: Any) -> int:
        name = trial.hparams.get("activation")
        return self.choices.index(name) if self.choices and name is not None else 0


_LAYOUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def layout_of(member: Member) -> StateLayout:
    """The member's ``StateLayout``, one per optimizer (held members share their template's)."""
    layout = _LAYOUTS.get(member.optimizer)
    if layout is None:
        layout = _LAYOUTS[member.optimizer] = StateLayout.of(member)
    return layout


_PARTS = (("weights", "trainable"), ("weights", "frozen"), ("slots", "m"), ("slots", "v"))


def stack_members(members: Sequence[Member]) -> LoopedState:
    """The members' states (``Member.state``), stacked, and their hyper-parameters."""
    states = [m.state() for m in members]
    layouts = [layout_of(m) for m in members]

    def stacked(part: str, name: str) -> tuple[tf.Tensor, ...]:
        count = len(getattr(layouts[0], name))
        return tuple(tf.constant(np.stack([getattr(s, part)[getattr(lay, name)[j]]
                                           for s, lay in zip(states, layouts, strict=True)]))
                     for j in range(count))

    def column(name: str, default: float | None = None) -> tf.Tensor:
        return tf.constant(np.stack([
            np.asarray(default, np.float32) if getattr(lay, name) is None
            else s.slots[getattr(lay, name)] for s, lay in zip(states, layouts, strict=True)]))

    hparams = {
        "sizes": tf.constant([m.batch_size for m in members], tf.int32),
        "lr": column("lr"),
        "horizon": column("horizon", 1.0),
        "schedule": tf.constant([lay.schedule for lay in layouts], tf.int32),
        "coefficients": column("coefficients"),
        "choice": tf.constant([lay.choice(m.trial) for m, lay in zip(members, layouts,
                                                                      strict=True)], tf.int32),
    }
    return LoopedState(*(stacked(part, name) for part, name in _PARTS),
                       iterations=column("iterations"), hparams=hparams)


def write_members(members: Sequence[Member], state: LoopedState) -> None:
    """Gives each member its new state (``Member.put_state``)."""
    arrays = [(part, name, [t.numpy() for t in tensors]) for (part, name), tensors in zip(
        (*_PARTS, ("slots", "iterations")),
        (state.weights, state.frozen, state.m, state.v, (state.iterations,)), strict=True)]
    for i, m in enumerate(members):
        old, layout = m.state(), layout_of(m)
        parts = {"weights": list(old.weights), "slots": list(old.slots)}
        for part, name, values in arrays:
            positions = getattr(layout, name)
            positions = (positions,) if isinstance(positions, int) else positions
            for position, value in zip(positions, values, strict=True):
                parts[part][position] = value[i]
        m.put_state(MemberState(tuple(parts["weights"]), tuple(parts["slots"]), m.step))
