"""A search's settings (``SearchSettings``): what ``PackedSearch`` takes beyond its parts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from packexp.runner.budget import NO_BUDGET, Budget
from packexp.runner.keep import NO_MODELS, KeepModels


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
