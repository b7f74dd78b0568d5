"""Hyperband's bracket arithmetic (Li et al.) and its successive halving, as a policy. Pure
Python."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from packexp.errors import ConfigError
from packexp.objectives import order
from packexp.schedulers.base import (
    Bracket,
    Decision,
    HalvingScheduler,
    Plan,
    Planned,
    Retire,
    Rung,
    Search,
)
from packexp.space import Trial

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.record import RungResult


class Hyperband(HalvingScheduler):
    """Hyperband with maximum resource ``R`` epochs and reduction factor ``eta``: brackets
    from the most exploratory to plain training, each a successive halving that waits for
    its rung's every pack before it promotes."""

    title = "Hyperband"

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

    def start(self, search: Search) -> None:
        super().start(search)
        self._rungs = RungByRung(self.brackets(), search.objective)

    def decide(self, queued: int) -> list[Decision]:
        return self._rungs.decide()

    def on_plan(self, plan: Planned) -> list[Retire]:
        return self._rungs.on_plan(plan)

    def on_result(self, result: RungResult) -> list[Retire]:
        return self._rungs.on_result(result)


class RungByRung:
    """Successive halving over ``brackets``, one after another, each rung waiting for its
    every result: the state a synchronous policy keeps (``Hyperband``; a population's rungs
    too, none halved). ``scores``: the rung's results by ``objective`` (higher is better)."""

    def __init__(self, brackets: Sequence[Bracket], objective: Objective,
                 halve: bool = True) -> None:
        self.brackets = list(brackets)
        self.objective = objective
        self.halve = halve
        self.at: tuple[int, int] | None = None  # (bracket index, rung) planned last
        self.trials: list[Trial] = []  # its trials, in the order decided
        self.scores: dict[str, float | None] = {}

    @property
    def complete(self) -> bool:
        """Whether every trial of the rung planned last has its result."""
        return all(t.trial_id in self.scores for t in self.trials)

    def decide(self) -> list[Decision]:
        """The next rung's plan once the rung before is complete (its dropped trials killed
        first), else the next bracket's first rung; [] while results are due."""
        if self.at is None:
            return self._first(0)
        b, i = self.at
        if not self.complete:
            return []
        bracket = self.brackets[b]
        if i + 1 == len(bracket.rungs):
            return self._first(b + 1)
        kept = keep_best(self.trials, self.scores, bracket.rungs[i + 1].n) if self.halve \
            else self.trials
        ids = {t.trial_id for t in kept}
        return [*(Retire(t.trial_id, "killed") for t in self.trials if t.trial_id not in ids),
                Plan(bracket.s, i + 1, tuple(t.trial_id for t in kept))]

    def _first(self, b: int) -> list[Decision]:
        if b == len(self.brackets):
            return []
        bracket = self.brackets[b]
        return [Plan(bracket.s, 0, draw=bracket.rungs[0].n)]

    def on_plan(self, plan: Planned) -> list[Retire]:
        """A rung planned: its trials, ordered as this policy decides them (a resume's plan
        lists them by pack); the rung before's trials it does not hold are killed (again,
        live: ``decide`` killed them first; a resume learns it here)."""
        b = next(k for k, br in enumerate(self.brackets) if br.s == plan.bracket)
        if plan.rung and self.at == (b, plan.rung - 1):
            ranked = keep_best(self.trials, self.scores, len(self.trials)) if self.halve \
                else self.trials
            position = {t.trial_id: k for k, t in enumerate(ranked)}
            trials = sorted(plan.trials, key=lambda t: position.get(t.trial_id, math.inf))
        else:
            trials = list(plan.trials)
        kept = set(plan.trial_ids)
        dropped = [Retire(t.trial_id, "killed") for t in self.trials
                   if plan.rung and t.trial_id not in kept]
        self.at, self.trials, self.scores = (b, plan.rung), trials, {}
        return dropped

    def on_result(self, result: RungResult) -> list[Retire]:
        """Notes a result of the rung; once the bracket's last rung is complete, its trials
        are finished."""
        if self.at is None or (self.brackets[self.at[0]].s, self.at[1]) != (result.bracket,
                                                                           result.rung):
            return []  # not the rung planned last: nothing it decides waits on it
        self.scores[result.trial_id] = self.objective.rank_score(result)
        b, i = self.at
        if self.complete and i + 1 == len(self.brackets[b].rungs):
            return [Retire(t.trial_id, "finished") for t in self.trials]
        return []


def keep_best(
    trials: Sequence[Trial], scores: Mapping[str, float | tuple[float, ...] | None], k: int
) -> list[Trial]:
    """The ``k`` trials with the highest score (several goals: by front, then crowding,
    ``objectives.order``); failed (None or NaN) ones rank last.

    Ties keep sampling order, so the choice is deterministic.
    """
    return [trials[i] for i in order([scores.get(t.trial_id) for t in trials])[:k]]
