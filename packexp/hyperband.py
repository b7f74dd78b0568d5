"""Hyperband's bracket arithmetic (Li et al.) and its successive-halving loop."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packexp.pack_options import LR_HORIZONS
from packexp.search_space import Trial


@dataclass(frozen=True)
class Rung:
    """``n`` configurations trained to ``r`` epochs in all."""

    n: int
    r: float


@dataclass(frozen=True)
class Bracket:
    s: int
    rungs: tuple[Rung, ...]


def steps_for(epochs: float, batch_size: int, train_size: int) -> int:
    """Steps that ``epochs`` epochs amount to at ``batch_size`` (at least one)."""
    return max(1, round(epochs * (train_size // batch_size)))


SampleFn = Callable[[Bracket], list[Trial]]
# (bracket, rung index, trials, epochs) -> trial_id -> validation accuracy, None if failed
TrainRungFn = Callable[[Bracket, int, list[Trial], float], Mapping[str, "float | None"]]


class Hyperband:
    """Hyperband with maximum resource ``R`` epochs and reduction factor ``eta``.

    With ``continue_on_promotion`` a promoted configuration trains only the epochs its new
    rung adds; without, it retrains from scratch (the paper's prototype).

    ``lr_horizon`` says where a trial's learning-rate schedule (``lr_schedule``) ends:
    ``rung``, at the budget of the rung it trains for, so each rung decays to its end and a
    promoted trial's rate rises again to where the longer horizon puts it; ``trial``, at
    ``R`` epochs, the most it can train, so a promoted trial goes on down one decay.
    """

    def __init__(self, R: int, eta: int = 3, continue_on_promotion: bool = True,
                 lr_horizon: str = "rung") -> None:
        for name, value, low in (("R", R, 1), ("eta", eta, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r}: must be an integer >= {low}")
        if not isinstance(continue_on_promotion, bool):
            raise ValueError(f"continue_on_promotion={continue_on_promotion!r}: must be true "
                             "or false")
        if lr_horizon not in LR_HORIZONS:
            raise ValueError(f"lr_horizon={lr_horizon!r}: must be {' or '.join(LR_HORIZONS)}")
        self.R = R
        self.lr_horizon = lr_horizon
        self.eta = eta
        self.continue_on_promotion = continue_on_promotion

    @property
    def s_max(self) -> int:
        """⌊log_eta R⌋, by integer arithmetic so that R = eta**k is never off by one."""
        s = 0
        while self.eta ** (s + 1) <= self.R:
            s += 1
        return s

    def bracket(self, s: int) -> Bracket:
        n = -(-(self.s_max + 1) * self.eta**s // (s + 1))  # ⌈(s_max+1)/(s+1)·eta^s⌉
        r = self.R / self.eta**s
        rungs = tuple(Rung(n=n // self.eta**i, r=r * self.eta**i) for i in range(s + 1))
        return Bracket(s=s, rungs=rungs)

    @property
    def horizon_epochs(self) -> float | None:
        """Epochs at which schedules end: ``R``, or None for each rung's own budget."""
        return float(self.R) if self.lr_horizon == "trial" else None

    def brackets(self) -> list[Bracket]:
        """Brackets from the most exploratory (s = s_max) to plain training (s = 0)."""
        return [self.bracket(s) for s in range(self.s_max, -1, -1)]

    def epochs(self, bracket: Bracket, continued: bool | None = None) -> float:
        """Epochs a bracket trains in all, with or without continuation on promotion."""
        return bracket_epochs(bracket, self.continue_on_promotion if continued is None
                              else continued)

    def drive(self, search: Any) -> None:
        """Runs the search (``driver.PackedSearch``): its brackets one after another."""
        self.run(search.sample, search.train_rung)

    def run(self, sample: SampleFn, train_rung: TrainRungFn) -> None:
        """Runs every bracket's successive halving.

        Args:
            sample: Draws a bracket's configurations.
            train_rung: Trains a rung's trials to the rung's epochs and scores them.
        """
        for bracket in self.brackets():
            trials = sample(bracket)
            for i, rung in enumerate(bracket.rungs):
                scores = train_rung(bracket, i, trials, rung.r)
                if i + 1 < len(bracket.rungs):
                    trials = keep_best(trials, scores, bracket.rungs[i + 1].n)


def bracket_epochs(bracket: Bracket, continued: bool) -> float:
    """Epochs ``bracket``'s rungs train in all: each promoted configuration only the epochs
    its rung adds when ``continued``, all of them otherwise."""
    total, before = 0.0, 0.0
    for rung in bracket.rungs:
        total += rung.n * (rung.r - before if continued else rung.r)
        before = rung.r
    return total


def keep_best(
    trials: Sequence[Trial], scores: Mapping[str, float | None], k: int
) -> list[Trial]:
    """The ``k`` trials with the highest score; failed (None or NaN) ones rank last.

    Ties keep sampling order, so the choice is deterministic.
    """

    def rank(item: tuple[int, Trial]) -> tuple[float, int]:
        i, trial = item
        score = scores.get(trial.trial_id)
        valid = score is not None and not math.isnan(score)
        return (-score if valid else math.inf, i)

    return [t for _, t in sorted(enumerate(trials), key=rank)[:k]]
