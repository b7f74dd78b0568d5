"""Pack only trials of equal batch size, greedily up to capacity."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from packexp.space import Trial
from packexp.strategies.base import Capacity, Strategy, greedy_fill


class BatchSizeStrategy(Strategy):
    """Groups by the ``key`` hyper-parameter, then fills packs greedily."""

    def __init__(self, key: str = "batch_size", seed: int = 0) -> None:
        super().__init__(seed)
        self.key = key

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        groups: dict[object, list[Trial]] = defaultdict(list)
        for t in trials:
            groups[t.hparams[self.key]].append(t)
        return [p for _, group in sorted(groups.items()) for p in greedy_fill(group, capacity)]
