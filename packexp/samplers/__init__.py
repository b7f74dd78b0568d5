"""Samplers: where a bracket's configurations come from. Pure Python, one module per config
file in ``conf/sampler/``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packexp.space import SearchSpace, Trial


@dataclass(frozen=True)
class Observation:
    """One scored rung of an earlier bracket: a configuration, its epochs, its score (by the
    search's objective, higher is better: ``Objective.score``)."""

    hparams: dict[str, Any]
    epochs: float
    score: float


class Sampler:
    """Draws ``n`` configurations for bracket ``bracket``: uniformly at random, as Li et al.'s
    Hyperband does. A sampler that learns reads ``history``, the scored rungs of the
    brackets before this one (synchronous Hyperband: all of them are done), so that a
    resumed search, which replays every bracket's results, samples as the unbroken one did.
    ``drawn`` holds the configurations the search drew before (earlier brackets, or ASHA's
    earlier plans): a finite space draws none of them again while it has others.
    """

    #: Whether configurations depend on results (``task=plan`` cannot show them ahead).
    learns: bool = False

    def sample(self, space: SearchSpace, n: int, seed: int, bracket: int,
               history: Sequence[Observation],
               drawn: Sequence[Mapping[str, Any]] = ()) -> list[Trial]:
        return space.sample(n, seed, bracket, drawn)
