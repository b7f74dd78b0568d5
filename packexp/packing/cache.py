"""Packs kept by structure: a later pack of the same structure reuses built models and traces.

A pack's set-up (building Keras models, tracing its step and evaluation functions) costs
far more than training it for one rung on a small model. The traced functions read the
members' variables (weights, optimizer slots, learning rates) and take batch sizes, data
orders and seeds as inputs, so a pack of new trials with the same structure can run on an
earlier pack's models and functions once their states are assigned to its variables
(whether a member's batches are padded to the bucket is traced: a plain pack keys its step
functions by it too).

The structure key of a trial is every hyper-parameter except ``RUNTIME_HPARAMS``: whatever
else may shape the model or its optimizer (activation, optimizer type, a width) makes a new
structure. A pack's key is its members' keys in a canonical order, and whether their batch
sizes differ (a fused pack masks padded rows only then). Members are assigned to the kept
models in that order, so each model always holds trials of one structure.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from packexp import telemetry
from packexp.packing.data import DeviceData
from packexp.packing.fused_graph import convolutional
from packexp.packing.initial import InitialWeights
from packexp.packing.member import IDLE, HeldMember, Member, MemberState
from packexp.packing.optimizers import RuleOptimizer, rule_options
from packexp.packing.pack import Pack
from packexp.packing.program import MemberFacts
from packexp.packing.schedules import base_learning_rate
from packexp.space import Trial
from packexp.space.options import (
    LOOPED,
    PACK_DEFAULTS,
    RUNTIME_HPARAMS,
    PackSettings,
    choose_program,
    member_bucket,
    member_key,
    pack_key,
)

__all__ = ["RUNTIME_HPARAMS", "PackCache", "member_key"]

log = logging.getLogger(__name__)

class PackCache:
    """Builds packs, or hands out a kept pack of the same structure with new members loaded.

    Args:
        make_member: Builds a trial's member in its starting state (seeded by the trial).
        data: The shared device data.
        pack_options: Keyword arguments of ``Pack``.
        keep: Most packs kept for reuse (least recently used dropped first); 0 builds
            every pack afresh.
        model_runtime: The model's hyper-parameters a built member takes at run time
            (``models.runtime_hparams``): no part of a structure.
        template: A configuration of the search (its space's first), built once when the
            cache must know whether its packs compile before it has built a member.
    """

    def __init__(self, make_member: Callable[[Trial], Member], data: DeviceData,
                 pack_options: Mapping[str, Any], keep: int = PACK_DEFAULTS.reuse,
                 model_runtime: Sequence[str] = (),
                 template: Mapping[str, Any] | None = None) -> None:
        self.make_member = make_member
        self.model_runtime = tuple(model_runtime)
        self.template = template
        self.data = data
        self.pack_options = dict(pack_options)
        self.keep = keep
        self._idle: OrderedDict[tuple, Pack] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.members_reused = 0  # members of new packs taken from kept ones, not built
        # Members of kept packs broken up for their members, by member structure.
        self._loose: dict[tuple, list[Member]] = {}
        self._unpacked: list[Member] = []  # loose members built to learn the structure
        # Per member structure: its initial weights' replayer (None: build them), whether
        # a fresh build has confirmed it, and a fresh optimizer's state.
        self._replay: dict[tuple, InitialWeights | None] = {}
        self._confirmed: set[tuple] = set()  # see ``replayed``
        self._fresh_slots: dict[tuple, tuple[Any, int]] = {}
        self._convolutional: bool | None = None  # of the run's model, once one is built
        # Per member structure: the built member held members of looped packs run on, or
        # None where its packs do not loop (``_template``).
        self._templates: dict[tuple, Member] = {}
        self._fresh: dict[str, MemberState] = {}  # templates' trials' fresh states
        self._loops: dict[tuple, bool] = {}  # (structure, members, fusion) -> whether it loops
        # A calibration's compiled packs, which no plan sees (``clear(shelve=True)``).
        self._shelf: dict[tuple, Pack] = {}

    def key(self, trials: Sequence[Trial], fusion: str | None = None) -> tuple:
        return pack_key(trials, self.pack_options.get("data_sharing") == "slice",
                        fusion or self.pack_options.get("fusion"), self.model_runtime,
                        self.bucketed)

    @property
    def bucketed(self) -> bool:
        """Whether packs run compiled (XLA) programs on batches padded to the bucket, so a
        program is kept per member-count bucket (``space.options.member_bucket``) and packs
        of fewer members fill idle seats. Known once a member is built: under
        ``jit_compile=auto``, only models without convolutions compile."""
        jit = self.pack_options.get("jit_compile", PACK_DEFAULTS.jit_compile)
        if (jit is False or not self.pack_options.get("batch_bucket")
                or self.pack_options.get("data_sharing") == "slice"
                or (jit is not True and self.pack_options.get("misaligned") == "switch")):
            return False  # (``Pack``: auto compiles only masked, gathered packs)
        if jit is not True and self._convolutional is None and self.template is not None:
            template = Trial("template", self.template, ())
            member = self._note(self.make_member(template))
            self._learn_structure(template, member)
            self._loose.setdefault(self.member_key(template), []).append(member)
            self._unpacked.append(member)  # built here, not taken from a pack: no reuse
        return jit is True or self._convolutional is False

    def _note(self, member: Member) -> Member:
        if self._convolutional is None:
            self._convolutional = convolutional(member.model)
        return member

    def _seats(self, order: list[Trial]) -> list[Trial]:
        """The pack's trials, then idle seats up to its member-count bucket when bucketed
        and its members share one structure (an idle seat trains nothing and reports
        nothing; it only keeps the program's shape)."""
        if not self.bucketed or len({self.member_key(t) for t in order}) != 1:
            return order
        first = order[0]
        return order + [Trial(f"{IDLE}{i}", first.hparams, (), seed=first.seed)
                        for i in range(member_bucket(len(order)) - len(order))]

    def member_key(self, trial: Trial, sliced: bool = False) -> tuple:
        return member_key(trial, sliced, self.model_runtime)

    def kept(self) -> tuple[frozenset[tuple], dict[tuple, int]]:
        """What a new pack could reuse: the kept packs' keys, and how many built members of
        each member structure there are (in kept packs or loose).

        ``replayed`` holds the member structures whose initial weights replay unbuilt."""
        sliced = self.pack_options.get("data_sharing") == "slice"
        members: dict[tuple, int] = {}
        loose = [m for ms in self._loose.values() for m in ms]
        for m in [m for pack in self._idle.values() for m in pack.members] + loose:
            key = self.member_key(m.trial, sliced)
            members[key] = members.get(key, 0) + 1
        return frozenset(self._idle), members

    def checkout(self, trials: Sequence[Trial], states: Mapping[str, MemberState | None],
                 fusion: str | None = None) -> tuple[Pack, bool]:
        """A pack of ``trials``, each in its state (None: fresh from its seed).

        Args:
            trials: The pack's members.
            states: Each trial's starting state; None (or absent) for a fresh trial.
            fusion: The pack's ``fusion`` setting; None for the cache's ``pack_options``.

        Returns:
            The pack, and whether it is a kept one reused.
        """
        sliced = self.pack_options.get("data_sharing") == "slice"
        order = sorted(trials, key=lambda t: (self.member_key(t, sliced), t.trial_id))
        built: dict[str, Member] = {}
        if self._convolutional is None:  # learn whether packs compile before keying them
            built[order[0].trial_id] = self._note(self.make_member(order[0]))
        order = self._seats(order)
        key = self.key(order, fusion)
        template = self._template(order, fusion, built)
        pack = self._idle.pop(key, None)
        if pack is not None:
            self.hits += 1
            return self._reseat(pack, order, lambda t: states.get(t.trial_id)
                                or self.initial_state(t)), True
        self.misses += 1
        members = []
        if template is not None:  # a looped pack: states held on the template, none built
            members = [HeldMember.on(template, t, states.get(t.trial_id)
                                     or self._fresh.pop(t.trial_id, None)
                                     or self.initial_state(t), template.preprocessing)
                       for t in order]
            return Pack(members, self.data, *self._settings(key)), False
        for trial in order:
            if trial.trial_id.startswith(IDLE):
                member = self._idle_member(trial, reuse=False) or self.make_member(trial)
                members.append(member.idle_as(trial))
                continue
            member = None if trial.trial_id in built else self._idle_member(trial)
            if member is not None:
                state = states.get(trial.trial_id) or self.initial_state(trial)
                members.append(member.load(trial, state, member.preprocessing))
                continue
            member = built.get(trial.trial_id) or self._note(self.make_member(trial))
            self._learn_structure(trial, member)
            state = states.get(trial.trial_id)
            members.append(member.load(trial, state, member.preprocessing) if state else member)
        shelved = self._shelf.pop(key, None)
        if shelved is not None:  # the members, set up as for any new pack, lend their states
            held = dict(zip((t.trial_id for t in order), members, strict=True))
            return self._reseat(shelved, order, lambda t: held[t.trial_id].state()), False
        return Pack(members, self.data, *self._settings(key)), False

    @staticmethod
    def _reseat(pack: Pack, order: Sequence[Trial],
                state_of: Callable[[Trial], MemberState]) -> Pack:
        """A kept or shelved ``pack`` whose seats take ``order``'s trials, each in
        ``state_of(trial)`` (an idle seat stays idle): its program, traced and compiled
        already, serves them, as exactly as a fresh one would (docs/isolation.md)."""
        for seat, trial in zip(pack.members, order, strict=True):
            if trial.trial_id.startswith(IDLE):
                seat.idle_as(trial)
                continue
            seat.load(trial, state_of(trial), seat.preprocessing)
        pack.reloaded()
        return pack

    def _settings(self, key: tuple) -> tuple[PackSettings, int | None]:
        """A pack's settings (its fusion is its key's, where the key sets one) and the
        search's batch bucket."""
        settings = PackSettings.from_config(self.pack_options)
        if key[-1] is not None:
            settings = dataclasses.replace(settings, fusion=key[-1])
        return settings, self.pack_options.get("batch_bucket")

    def _template(self, order: Sequence[Trial], fusion: str | None,
                  built: Mapping[str, Member]) -> Member | None:
        """The member whose model a looped pack of ``order`` runs, its members held as
        states (``HeldMember``); None where the pack would not loop (``Pack.looped``: an
        uncompiled plain pack of one structure with update rules), so its members are built.
        """
        options = self.pack_options
        if (options.get("loop", PACK_DEFAULTS.loop) == "off" or self.bucketed
                or options.get("jit_compile") is True or options.get("misaligned") == "switch"
                or options.get("data_sharing") == "slice"):
            return None
        structures = {self.member_key(t) for t in order}
        if len(structures) != 1:
            return None
        structure = structures.pop()
        if structure not in self._templates:
            first = order[0]
            member = built.get(first.trial_id) or self._note(self.make_member(first))
            self._learn_structure(first, member)
            self._templates[structure] = member
            self._fresh[first.trial_id] = member.state()  # its trial's state, built
        template = self._templates[structure]
        decision = (structure, len(order), fusion)
        if decision not in self._loops:  # as the pack engine decides, once per size
            settings, _ = self._settings(self.key(order, fusion))
            program = choose_program(MemberFacts([template] * len(order), self.data.head,
                                                 self.data.streams),
                                     settings)
            self._loops[decision] = program.kind == LOOPED
        return template if self._loops[decision] else None

    @property
    def replayed(self) -> frozenset[tuple]:
        return frozenset(self._confirmed)

    def _idle_member(self, trial: Trial, reuse: bool = True) -> Member | None:
        """A kept member of ``trial``'s structure, taken out of its pack; None if none is.
        With ``reuse``, one that trained in another pack counts in ``members_reused`` (one
        built to learn the structure does not).

        With no kept pack of the whole pack's structure, the members still need not be built:
        a kept pack that holds one of the same member structure gives it up (the least
        recently used first). That pack is broken: its other members stay for later packs
        to take, and its traced step goes.
        """
        sliced = self.pack_options.get("data_sharing") == "slice"
        key = self.member_key(trial, sliced)
        if not self._loose.get(key):
            # Held members run only in looped packs: their packs are never broken up.
            broken = next((k for k, pack in self._idle.items()
                           if any(self.member_key(m.trial, sliced) == key for m in pack.members)
                           and not any(isinstance(m, HeldMember) for m in pack.members)),
                          None)
            if broken is None or self.bucketed:  # a compiled program outweighs a build
                return None
            for m in self._idle.pop(broken).members:
                self._loose.setdefault(self.member_key(m.trial, sliced), []).append(m)
        member = self._loose[key].pop()
        if any(member is m for m in self._unpacked):
            self._unpacked = [m for m in self._unpacked if m is not member]
        elif reuse:
            self.members_reused += 1
        # Loose members hold device memory too: at most ``keep``, the oldest go first.
        while sum(map(len, self._loose.values())) > self.keep:
            dropped = next(ms for ms in self._loose.values() if ms).pop(0)
            self._unpacked = [m for m in self._unpacked if m is not dropped]
        return member

    def initial_state(self, trial: Trial) -> MemberState:
        """The state a fresh build of ``trial``'s member has, replayed where that is exact.

        A structure's replayer is used once a fresh build of another trial has confirmed it
        (``InitialWeights``); until then, and where it failed, the member is built.
        """
        key = self.member_key(trial)
        replay = self._replay.get(key)
        if replay is not None and key in self._confirmed:
            return self._replayed(key, replay, trial)
        state = self.make_member(trial).state()
        if replay is not None:
            again = self._replayed(key, replay, trial)
            if all(np.array_equal(a, b) for a, b in zip(again.weights + again.slots,
                                                       state.weights + state.slots,
                                                       strict=True)):
                self._confirmed.add(key)
            else:
                log.info("initial weights of %s differ when replayed; building them", key)
                self._replay[key] = None
        return state

    def _replayed(self, key: tuple, replay: InitialWeights, trial: Trial) -> MemberState:
        slots, lr_index = self._fresh_slots[key]
        ruled = rule_options(trial.hparams)
        if isinstance(slots, RuleOptimizer):  # a template: the trial's rule sets the slots
            slots = slots.fresh_slots(*ruled, trial.learning_rate)
        else:
            slots = list(slots)
            slots[lr_index] = np.asarray(trial.learning_rate, slots[lr_index].dtype)
        return MemberState(replay.replay(trial.seed), tuple(slots), 0)

    def _learn_structure(self, trial: Trial, member: Member) -> None:
        """Records a freshly built member's structure: its replayer and fresh optimizer."""
        key = self.member_key(trial)
        if key in self._replay:
            return
        variables = member.optimizer.variables
        lr = base_learning_rate(member.optimizer)
        lr_index = next((i for i, v in enumerate(variables) if v is lr), None)
        try:
            if lr_index is None:
                raise ValueError("the learning rate is not one of the optimizer's variables")
            self._replay[key] = InitialWeights(member.model, trial.seed)
        except ValueError as e:
            log.info("initial weights of %s are built, not replayed: %s", key, e)
            self._replay[key] = None
            return
        self._fresh_slots[key] = (member.optimizer if isinstance(member.optimizer, RuleOptimizer)
                                  else tuple(v.numpy() for v in variables), lr_index)

    def checkin(self, pack: Pack) -> None:
        """Keeps a pack that trained to the end for a later pack of its structure."""
        if self.keep <= 0:
            return
        key = self.key([m.trial for m in pack.members], pack.fusion)
        self._idle[key] = pack
        self._idle.move_to_end(key)
        while self._shelf and len(self._idle) + len(self._shelf) > self.keep:
            del self._shelf[next(iter(self._shelf))]  # a shelved pack counts against keep
        while len(self._idle) > self.keep:
            self._idle.popitem(last=False)

    def clear(self, shelve: bool = False) -> None:
        """Forgets every kept pack, member and replay confirmation, and the counts: the cache
        as built, so what was trained before (a calibration) steers no plan.

        With ``shelve`` (after a calibration), the kept packs that run a compiled program
        on a CPU are shelved instead: no plan sees them, and a later new pack of the same
        key is set up as a new pack is (its members built or taken, the counts kept) but
        trains in the shelved pack's program rather than tracing and compiling its own. The
        calibration measured the same programs the search then runs (docs/BENCHMARKS.md).
        On a GPU nothing is shelved: the plans do not count shelved packs' device memory.
        """
        shelf = ({key: pack for key, pack in self._idle.items()
                  if not any(isinstance(m, HeldMember) for m in pack.members)}
                 if shelve and self.bucketed and telemetry.gpu_device() is None else {})
        for kept in (self._idle, self._loose, self._unpacked, self._templates, self._fresh,
                     self._replay, self._confirmed, self._fresh_slots, self._loops,
                     self._shelf):
            kept.clear()
        self._shelf = shelf
        self.hits = self.misses = self.members_reused = 0
        # Learned again as a cache built afresh learns it: ``bucketed`` builds the template
        # member into the loose ones, which a plan's predictions count.
        self._convolutional = None

