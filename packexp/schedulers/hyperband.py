"""Hyperband's bracket arithmetic (Li et al.) and its successive-halving loop. Pure Python."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from packexp.errors import ConfigError
from packexp.schedulers.base import Bracket, Rung, Scheduler, Search
from packexp.search_space import Trial

SampleFn = Callable[[Bracket], list[Trial]]
# (bracket, rung index, trials, epochs) -> trial_id -> validation accuracy, None if failed
TrainRungFn = Callable[[Bracket, int, list[Trial], float], Mapping[str, "float | None"]]


class Hyperband(Scheduler):
    """Hyperband with maximum resource ``R`` epochs and reduction factor ``eta``: brackets
    from the most exploratory to plain training, each a successive halving that waits for
    its rung's every pack before it promotes."""

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

    def brackets(self) -> list[Bracket]:
        """Brackets from the most exploratory (s = s_max) to plain training (s = 0)."""
        return [self.bracket(s) for s in range(self.s_max, -1, -1)]

    def check_schedule(self) -> None:
        """Below ``R = eta`` Hyperband has one bracket of one configuration: nothing halves."""
        if self.eta > self.R:
            raise ConfigError(f"scheduler.R={self.R}: Hyperband with eta={self.eta} needs R >= "
                              f"{self.eta} to halve (below that it trains one configuration "
                              f"for R epochs); the smallest R that works is {self.eta}")

    def drive(self, search: Search) -> None:
        """Runs the search: its brackets one after another."""
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
