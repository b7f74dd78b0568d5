"""No packing: every trial trains alone, as in the original Hyperband."""

from __future__ import annotations

from collections.abc import Sequence

from packexp.space import Trial
from packexp.strategies.base import Capacity, Strategy


class NoneStrategy(Strategy):
    """The null strategy: singletons."""

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        return [[t] for t in trials]
