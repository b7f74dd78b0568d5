"""A pack's program: the ``StepProgram`` protocol its three kinds share (plain, fused,
looped), the facts of built members that choose one (``space.options.choose_program``), each
worked out when the choice first needs it, and ``step_program``, which builds the chosen one."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol

from packexp import telemetry
from packexp.objectives import NO_HEAD, Head
from packexp.packing.data import DeviceData, StreamData
from packexp.packing.fused import FusedProgram, why_unfusable
from packexp.packing.fused_graph import convolutional
from packexp.packing.looped import LoopedProgram
from packexp.packing.looped_state import why_unloopable
from packexp.packing.member import Member
from packexp.packing.plain import PlainProgram
from packexp.packing.plain_eval import Evaluator
from packexp.packing.stats import PackStats
from packexp.space.options import FUSED, LOOPED, PackSettings, Program, choose_program


class StepProgram(Protocol):
    """How a pack's members train and are scored: ``PlainProgram``, ``FusedProgram`` or
    ``LoopedProgram``. A program holds its members as they are when it is built; the pack
    builds a new one when its membership changes."""

    def train(self, remaining: dict[str, int]) -> PackStats:
        """Trains each member its ``remaining`` steps (trial_id to steps), counting them
        down as it goes; returns what it measured."""

    def evaluator(self) -> tuple[Evaluator, bool]:
        """The members' evaluation of one validation batch, and whether it was traced now."""

    def reload(self) -> None:
        """Takes in new member states loaded into the same models and optimizers."""


def step_program(program: Program, members: Sequence[Member], data: DeviceData | StreamData,
                 settings: PackSettings, batch_bucket: int | None) -> StepProgram:
    """Builds the program ``choose_program`` chose for ``members``."""
    if program.kind == FUSED:
        return FusedProgram(members, data, settings, jit_compile=program.xla,
                            batch_bucket=batch_bucket)
    if program.kind == LOOPED:
        return LoopedProgram(members, data, settings.chunk_steps)
    return PlainProgram(members, data, settings, jit_compile=program.xla,
                        batch_bucket=batch_bucket)


#: Why a model's own loss or metrics keep a pack plain: only the plain program runs Keras's
#: loss and metric objects on each member's own model.
OWN_HEAD = "the model's own loss or metrics (model.loss, model.metrics) train plain packs only"


#: Why streamed data keeps a pack plain: only the plain program trains from a block read
#: for the pack (``PlainProgram``); the fused and looped ones gather from data on the device.
STREAMED = "streamed data (dataset.cache=none) trains plain packs only"


class MemberFacts:
    """``PackFacts`` of built members (fusion's and looping's checks walk the models), on
    data whose ``head`` may name the model's own loss and metrics, and that may stream."""

    def __init__(self, members: Sequence[Member], head: Head = NO_HEAD,
                 streams: bool = False) -> None:
        self._members = list(members)
        self.members = len(self._members)
        self._head = head
        self._streams = streams

    @functools.cached_property
    def convolutional(self) -> bool:
        return any(convolutional(m.model) for m in self._members)

    @functools.cached_property
    def gpu(self) -> bool:
        return telemetry.gpu_device() is not None

    @functools.cached_property
    def unfusable(self) -> str | None:
        if self._streams:
            return STREAMED
        return OWN_HEAD if self._head.custom else why_unfusable(self._members)

    @functools.cached_property
    def unloopable(self) -> str | None:
        if self._streams:
            return STREAMED
        return OWN_HEAD if self._head.custom else why_unloopable(self._members)


def why_not_fused(members: Sequence[Member], data_sharing: str, fusion: str = "auto"
                  ) -> str | None:
    """None when ``members`` train fused under ``fusion``; otherwise the reason, for the log."""
    settings = PackSettings(data_sharing=data_sharing, fusion=fusion)
    return choose_program(MemberFacts(members), settings).unfused
