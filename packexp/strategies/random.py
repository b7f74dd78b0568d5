"""Random groups up to capacity."""

from __future__ import annotations

from collections.abc import Sequence

from packexp.space import Trial
from packexp.strategies.base import Capacity, Strategy, greedy_fill


class RandomStrategy(Strategy):
    """Shuffles the trials, then fills packs greedily."""

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        order = self._rng(trials).permutation(len(trials))
        return greedy_fill([trials[i] for i in order], capacity)
