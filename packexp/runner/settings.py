"""A search's settings, the context its parts read (``SearchContext``) and its clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from packexp.runner.budget import NO_BUDGET, Budget
from packexp.runner.keep import NO_MODELS, KeepModels
from packexp.surrogate import OFF, Surrogate

if TYPE_CHECKING:
    from packexp.space import SearchSpace
    from packexp.strategies import Capacity, Strategy


@dataclass(frozen=True)
class SearchSettings:
    """How a search trains and when it stops: what ``PackedSearch`` takes beyond its parts.

    Attributes:
        seed: The search's seed (its draws, and each trial's data order).
        tags: The search's names (strategy, model, dataset), on each trial's record.
        continue_on_promotion: A promoted trial continues from its checkpoint; else it
            retrains from scratch with the same data order and updates, so the same scores.
        lr_horizon: Epochs where learning-rate schedules end; None: each rung's budget.
        capacity_source: The setting the capacity comes from (for error messages).
        probe_seconds: The memory probes' time so far.
        train_size: Training examples: a rung's steps per trial, for the strategy.
        budget: When to stop early.
        keep: Whose trained weights the search hands over (``keep.py``).
        surrogate: Its trials' stand-ins: in a search over them only the full-width trials
            rank for the best, the front and the kept models.
    """

    seed: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)
    continue_on_promotion: bool = True
    lr_horizon: float | None = None
    capacity_source: str = "capacity"
    probe_seconds: Callable[[], float] = lambda: 0.0
    train_size: int = 0
    budget: Budget = NO_BUDGET
    keep: KeepModels = NO_MODELS
    surrogate: Surrogate = OFF


@dataclass(frozen=True)
class SearchContext:
    """What every part of a search reads and none changes: the space it draws from, the
    strategy and capacity it packs with, and its settings. ``PackedSearch`` builds it once;
    its parts (``Draws``, ``Packer``, ``Ledger``) take it, not copies of its fields."""

    space: SearchSpace
    strategy: Strategy
    capacity: Capacity
    settings: SearchSettings = field(default_factory=SearchSettings)


@dataclass
class SearchClock:
    """The search's clock, owned by the search: it starts when the first pack is sent
    (``start``), on the executor's clock (``started``) and the wall's (``first_pack_at``)."""

    started: float = 0.0  # the executor's clock until the first pack, then its time then
    first_pack_at: float | None = None  # time.time() when the first pack began; None before

    def start(self, now: Callable[[], float]) -> None:
        """The first pack is sent at ``now()`` (the executor's clock): start-up is over."""
        if self.first_pack_at is None:
            self.first_pack_at = time.time()
            self.started = now()
