"""The facts of built members that choose a pack's program (``pack_options.choose_program``:
fused, looped or plain), each worked out when the choice first needs it."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from packexp import telemetry
from packexp.pack_options import PackSettings, choose_program
from packexp.packing.fused import why_unfusable
from packexp.packing.fused_graph import convolutional
from packexp.packing.looped import why_unloopable
from packexp.packing.member import Member


class MemberFacts:
    """``PackFacts`` of built members (fusion's and looping's checks walk the models)."""

    def __init__(self, members: Sequence[Member]) -> None:
        self._members = list(members)
        self.members = len(self._members)

    @functools.cached_property
    def convolutional(self) -> bool:
        return any(convolutional(m.model) for m in self._members)

    @functools.cached_property
    def gpu(self) -> bool:
        return telemetry.gpu_device() is not None

    @functools.cached_property
    def unfusable(self) -> str | None:
        return why_unfusable(self._members)

    @functools.cached_property
    def unloopable(self) -> str | None:
        return why_unloopable(self._members)


def why_not_fused(members: Sequence[Member], data_sharing: str, fusion: str = "auto"
                  ) -> str | None:
    """None when ``members`` train fused under ``fusion``; otherwise the reason, for the log."""
    settings = PackSettings(data_sharing=data_sharing, fusion=fusion)
    return choose_program(MemberFacts(members), settings).unfused
