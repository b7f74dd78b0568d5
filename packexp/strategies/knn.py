"""The paper's nearest-neighbour packing: a random centroid and its closest trials."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from packexp.search_space import Trial
from packexp.strategies.base import Capacity, Strategy


class KnnStrategy(Strategy):
    """Packs each random centroid with its nearest trials.

    Distance is L1 over ``Trial.features``: index gaps for numeric hyper-parameters, 0 or 1
    for categorical ones. A trial joins a centroid's pack while the pack still fits and the
    trial is within ``threshold`` of the centroid.
    """

    def __init__(self, threshold: float | None = None, seed: int = 0) -> None:
        super().__init__(seed)
        if threshold is not None and not threshold >= 0:
            raise ValueError(f"threshold={threshold!r}: must be >= 0, or null for no limit")
        self.threshold = math.inf if threshold is None else float(threshold)

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        if not trials:
            return []
        features = np.array([t.features for t in trials])
        distances = np.abs(features[:, None, :] - features[None, :, :]).sum(-1)
        rng = self._rng(trials)
        left = list(range(len(trials)))
        packs: list[list[Trial]] = []
        while left:
            centroid = left[int(rng.integers(len(left)))]
            # Stable sort: ties go to the earlier-sampled trial.
            near = sorted(left, key=lambda j: distances[centroid, j])
            group = [trials[centroid]]
            for j in near:
                if j == centroid:
                    continue
                if distances[centroid, j] > self.threshold:
                    break
                if capacity.fits([*group, trials[j]]):
                    group.append(trials[j])
            taken = {t.trial_id for t in group}
            left = [j for j in left if trials[j].trial_id not in taken]
            packs.append(group)
        return packs
