"""The strategy extension point: group a rung's trials into packs that fit the device."""

from __future__ import annotations

import abc
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from packexp.search_space import Trial, derive_seed


@dataclass(frozen=True)
class Capacity:
    """What one pack may hold: a limit, each trial's cost against it, and a member cap.

    With the default unit cost the limit is a member count; a memory model passes bytes.
    """

    limit: float
    cost: Callable[[Trial], float] = lambda trial: 1.0
    max_members: int | None = None

    def fits(self, group: Sequence[Trial]) -> bool:
        if self.max_members is not None and len(group) > self.max_members:
            return False
        return sum(self.cost(t) for t in group) <= self.limit

    @classmethod
    def members(cls, n: int) -> Capacity:
        return cls(limit=float(n))


class Strategy(abc.ABC):
    """Partitions trials into packs; pure Python, deterministic under its seed."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    @abc.abstractmethod
    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        """Groups ``trials`` into packs.

        Args:
            trials: The rung's trials.
            capacity: What one pack may hold.

        Returns:
            Packs that together hold every trial exactly once, none over capacity.
        """

    def _rng(self, trials: Sequence[Trial]) -> np.random.Generator:
        # Seeded by the root seed and the trials themselves, never by call order, so a
        # resumed run re-derives the same packs.
        ids = ",".join(sorted(t.trial_id for t in trials)).encode()
        return np.random.default_rng(derive_seed(self.seed, zlib.crc32(ids)))


def greedy_fill(trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
    """Fills packs in the given order, opening a new pack when the next trial does not fit."""
    packs: list[list[Trial]] = []
    for trial in trials:
        if packs and capacity.fits([*packs[-1], trial]):
            packs[-1].append(trial)
        else:
            packs.append([trial])
    return packs
