"""The configurations a search draws: from its sampler, told the results so far, and none
drawn before while a finite space has others. Pure Python."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packexp.objectives import Objective
from packexp.samplers import Observation, Sampler
from packexp.schedulers.base import Bracket
from packexp.space import SearchSpace, Trial
from packexp.space.drawn import Drawn

if TYPE_CHECKING:
    from packexp.runner.settings import SearchContext

log = logging.getLogger(__name__)


@dataclass
class Draws:
    """Draws configurations and adds them to ``study`` (``Study``), whose scored
    rungs are what the sampler learns from.

    A synchronous scheduler draws a bracket at a time (``bracket``), told the brackets before
    it (of the search's ``brackets``, in the order they run); an asynchronous one draws as it
    goes (``more``), told every result so far, and names its draws itself. ``context``: the
    search's (its space and seed).
    """

    context: SearchContext
    sampler: Sampler
    study: Any  # runner.study.Study
    drawn: dict[str, Trial] = field(default_factory=dict)  # by ``more``, or replayed
    configs: Drawn = field(default_factory=Drawn)  # their values, in the order drawn

    @property
    def space(self) -> SearchSpace:
        return self.context.space

    def bracket(self, bracket: Bracket, brackets: Sequence[Bracket] = ()) -> list[Trial]:
        """``bracket``'s configurations, told the brackets sampled before it among
        ``brackets`` (the search's, in the order they run): what a resumed run knows at its
        start too, since it replays every bracket's results."""
        earlier = _earlier(bracket, brackets)
        before = [t for t in self.study.trials.values() if t.bracket in earlier]
        trials = self.sampler.sample(self.space, bracket.rungs[0].n,
                                     self.context.settings.seed, bracket.s,
                                     observed(before, self.study.objective),
                                     [dict(t.hparams) for t in before])
        if len(trials) < bracket.rungs[0].n:
            log.warning("bracket %d wants %d configurations; the space has only %d",
                        bracket.s, bracket.rungs[0].n, len(trials))
        self.study.add_trials(bracket.s, trials)
        return trials

    def more(self, n: int, salt: int, first: int) -> list[Trial]:
        """``n`` new configurations, told every result so far; numbered ``t<i>`` from
        ``first`` in the order drawn, seeded by ``salt`` (the plan that draws them)."""
        trials = [dataclasses.replace(t, trial_id=f"t{first + i:04d}", bracket=0)
                  for i, t in enumerate(self.sampler.sample(
                      self.space, n, self.context.settings.seed, salt,
                      self.study.observed(), self.configs))]
        self.adopt(trials)
        return trials

    def given(self, configs: Sequence[tuple[str, Any, int]]) -> list[Trial]:
        """Configurations started as they are (``Plan.given``: trial id, values, seed), known
        as drawn so a resume reads them back as it reads ``more``'s."""
        trials = [Trial(trial_id, dict(hparams), self.space.features(hparams), seed, 0)
                  for trial_id, hparams, seed in configs]
        self.adopt(trials)
        return trials

    def adopt(self, trials: list[Trial]) -> None:
        """Known as drawn by ``more``: ``trials`` a resume read back from the journal."""
        self.study.add_trials(0, trials)
        self.configs.add(t.hparams for t in trials if t.trial_id not in self.drawn)
        self.drawn.update((t.trial_id, t) for t in trials)

    def replayed(self, sampled: Sequence[dict]) -> list[Trial]:
        """A journaled plan's drawn configurations (``PlanRecord.sampled``), known again."""
        trials = [Trial(d["trial_id"], d["hparams"], self.space.features(d["hparams"]),
                        d["seed"], 0) for d in sampled]
        self.adopt(trials)
        return trials


def observed(trials: Iterable[Any], objective: Objective) -> list[Observation]:
    """Every scored rung of ``trials`` (``TrialRecord``s), scored by ``objective``: what a
    sampler learns from."""
    return [Observation(dict(t.hparams), r.epochs, objective.score(r))
            for t in trials for r in t.rungs if objective.score(r) is not None]


def _earlier(bracket: Bracket, brackets: Sequence[Bracket]) -> set[int]:
    order = [b.s for b in brackets] or [bracket.s]
    return set(order[:order.index(bracket.s)]) if bracket.s in order else set()
