"""The paper's nearest-neighbour packing: a random centroid and its closest trials."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from packexp.space import Trial
from packexp.strategies.base import Capacity, Strategy


class KnnStrategy(Strategy):
    """Packs each random centroid with its nearest trials, first-fit in distance order.

    Distance is L1 over ``Trial.features``. The paper's text says Euclidean, but its worked
    example is L1 (Table 3: batch sizes 20 and 40 are 4 list steps apart, sgd and adagrad
    differ, so distance 4 + 1 = 5, where Euclid gives sqrt(17)), and packexp follows the
    example. Per hyper-parameter it adds the index gap of a numeric value list, 0 or 1 for a
    categorical one, and for an int or float range the gap normalised to the range,
    ``|x - y| / (high - low)`` (of the logs with ``log: true``), at most 1
    (``SearchSpace``).

    Each pack starts from a centroid drawn at random from the trials left. The others are
    tried from the nearest out: the first beyond ``threshold`` ends the pack; one within it
    joins if the pack still fits the capacity (memory and ``pack.max_members``) with it, and
    is skipped otherwise, so a farther, smaller one may still join. Repeat until every trial
    is packed.

    Args:
        threshold: The largest distance from the centroid a pack-mate may have; None packs
            up to capacity, as the paper's "until the device runs out of memory". Lower
            means more, more alike packs (0: only identical features, towards ``none``).
        seed: Seeds the centroids (with the trials' identities).
    """

    def __init__(self, threshold: float | None = None, seed: int = 0) -> None:
        super().__init__(seed)
        if threshold is not None and not threshold >= 0:
            raise ValueError(f"threshold={threshold!r}: must be >= 0, or null for no limit")
        self.threshold = math.inf if threshold is None else float(threshold)

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        if not trials:
            return []
        # Each centroid's distances alone, not every pair's: a rung of n trials needs n rows
        # of n only one at a time, and the scan stops once nothing more can fit.
        features = np.array([t.features for t in trials], dtype=float).reshape(len(trials), -1)
        costs = [capacity.cost(t) for t in trials]
        cheapest = min(costs)
        most = capacity.max_members or len(trials)
        rng = self._rng(trials)
        left = np.arange(len(trials))
        packs: list[list[Trial]] = []
        while len(left):
            centroid = int(left[int(rng.integers(len(left)))])
            distance = np.abs(features[left] - features[centroid]).sum(-1)
            near = np.argsort(distance, kind="stable")  # ties: the earlier-sampled trial
            group, used, taken = [trials[centroid]], costs[centroid], {centroid}
            for i in near.tolist():
                j = int(left[i])
                if j == centroid:
                    continue
                if len(group) >= most or used + cheapest > capacity.limit:
                    break  # full: what ``capacity.fits`` would refuse to every trial left
                if distance[i] > self.threshold:
                    break
                if used + costs[j] <= capacity.limit:  # ``capacity.fits``, summed as it sums
                    group.append(trials[j])
                    used += costs[j]
                    taken.add(j)
            left = left[[int(j) not in taken for j in left]]
            packs.append(group)
        return packs
