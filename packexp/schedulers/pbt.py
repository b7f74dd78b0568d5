"""Population Based Training (Jaderberg et al. 2017): a population trained together; every
``interval`` epochs its worst members copy the weights and optimizer state of its best
(exploit) and perturb the copied hyper-parameters (explore). Pure Python.

The population is the bracket's configurations; each interval is a rung that trains all of
them to its epochs, and each member continues from its own end state or, once exploited,
from its donor's (the runner carries an ``Exploits`` decision out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from packexp.errors import ConfigError, is_number, positive_int
from packexp.objectives import ACCURACY, Objective
from packexp.records.record import Exploit, RungResult
from packexp.schedulers.base import (
    Bracket,
    Decision,
    Exploits,
    Planned,
    Retire,
    Rung,
    Scheduler,
    Search,
)
from packexp.schedulers.hyperband import RungByRung
from packexp.space import SearchSpace, derive_seed
from packexp.space.dimensions import Choice, FloatRange, IntRange

# (donor's hyper-parameters, a candidate's) -> whether a member of the candidate can take
# the donor's state: the same member structure (``PackedSearch.fits``).
Fits = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


class Pbt(Scheduler):
    """A population of ``population`` members, each trained ``epochs`` epochs in all; after
    every ``interval`` epochs, the worst ``quantile`` of the members (and any that diverged)
    each copy a member of the best ``quantile``, drawn at random, and explore its values.

    Explore (``explore``): a float or int range is multiplied by one of
    ``perturbation_factors`` and kept within its bounds; a numeric value list moves to a
    neighbouring value; a categorical choice (an optimizer, an activation) stays the donor's.
    Each value is drawn afresh from the space instead with ``resample_probability``.
    """

    title = "PBT"
    explores = True

    def __init__(self, population: int = 16, epochs: int = 27, interval: int = 3,
                 quantile: float = 0.25, perturbation_factors: Sequence[float] = (0.8, 1.2),
                 resample_probability: float = 0.25, R: int | None = None,
                 continue_on_promotion: bool = True) -> None:
        if R is not None:  # set by a preset for Hyperband (experiment=quick)
            raise ValueError(f"R={R}: scheduler=pbt has no R; each member trains "
                             f"scheduler.epochs epochs (set that, or drop the preset that sets R)")
        if continue_on_promotion is not True:
            raise ValueError(f"continue_on_promotion={continue_on_promotion!r}: a population "
                             "always continues from its members' (or donors') states")
        super().__init__(R=positive_int("epochs", epochs))
        self.population = positive_int("population", population, 2)
        self.interval = positive_int("interval", interval)
        if self.interval > epochs:
            raise ValueError(f"interval={interval}: must be <= epochs={epochs}; each member "
                             "would train its epochs without a single exploit")
        if not (is_number(quantile) and 0 < quantile <= 0.5):
            raise ValueError(f"quantile={quantile!r}: must be a number in (0, 0.5] (the "
                             "share replaced and the share copied from may not overlap)")
        self.quantile = float(quantile)
        factors = list(perturbation_factors) if isinstance(perturbation_factors,
                                                             Sequence) else None
        if not factors or any(not is_number(f) or f <= 0 for f in factors):
            raise ValueError(f"perturbation_factors={perturbation_factors!r}: must be a "
                             "non-empty list of positive numbers")
        self.perturbation_factors = tuple(float(f) for f in factors)
        if not (is_number(resample_probability) and 0 <= resample_probability <= 1):
            raise ValueError(f"resample_probability={resample_probability!r}: must be a "
                             "number in [0, 1]")
        self.resample_probability = float(resample_probability)
        self.budget = float(self.population * epochs)  # each member trains R = epochs

    @property
    def marks(self) -> list[float]:
        """The epochs at which intervals end: ``interval``, ``2·interval``, ..., ``epochs``."""
        return interval_ends(self.R, self.interval)

    def brackets(self) -> list[Bracket]:
        """One bracket: a rung per interval, each training the whole population."""
        return [Bracket(0, tuple(Rung(self.population, float(e)) for e in self.marks))]

    def replaced(self) -> int:
        """Members replaced (and donors drawn from) at each interval's end."""
        return replaced_count(self.population, self.quantile)

    def check_schedule(self) -> None:
        """A population whose only interval ends at its last epoch never exploits."""
        if len(self.marks) > 1:
            return
        if self.R == 1:
            raise ConfigError("scheduler.epochs=1: a population exploits between intervals, "
                              "so it needs at least 2 epochs")
        raise ConfigError(f"scheduler.interval={self.interval}: with epochs={self.R} no "
                          f"interval ends before the last epoch, so no member is ever "
                          f"exploited; the largest interval that works is {self.R - 1}")

    def check_objective(self, objective: Objective) -> None:
        """A population copies the best into the worst: it needs one order, not a front."""
        if objective.several:
            raise ConfigError(f"objective.metrics: scheduler=pbt ranks by one metric, and "
                              f"{[n for n, _ in objective.goals]} are several; use one "
                              "(objective.metric=...) or scheduler=hyperband or asha")

    def check_space(self, space: SearchSpace) -> None:
        """A population finds its learning rate's schedule itself; an ``lr_schedule``, whose
        progress counts its member's updates, would be moved by an exploit that changes the
        batch size."""
        if space.conditions:
            raise ConfigError(f"search_space.params.{next(iter(space.conditions))}.when: "
                              "scheduler=pbt explores every hyper-parameter of a member; use "
                              "a space without conditions (or scheduler=hyperband or asha)")
        if "lr_schedule" in space.dims:
            raise ConfigError("search_space.params.lr_schedule: scheduler=pbt makes each "
                              "member's learning-rate schedule itself; drop lr_schedule from "
                              "the space (or use scheduler=hyperband or asha)")

    def start(self, search: Search) -> None:
        super().start(search)
        self._rungs = RungByRung(self.brackets(), search.objective, halve=False)
        self._exploited: set[int] = set()

    def decide(self, queued: int) -> list[Decision]:
        """The next interval's plan once every member has its result of this one, after this
        interval's exploits (unless they are made already: a resume read them back)."""
        decisions = self._rungs.decide()
        if not decisions or decisions[-1].rung == 0:
            return decisions
        ended = decisions[-1].rung - 1
        if ended in self._exploited:
            return decisions
        members = self._rungs.trials
        rng = np.random.default_rng(derive_seed(self.search.seed, 0x9B7, ended))
        exploits = self.exploits({t.trial_id: dict(t.hparams) for t in members},
                                 self._rungs.scores, self.search.space, rng,
                                 self.search.fits, self.search.objective)
        return [Exploits(decisions[-1].bracket, ended, tuple(exploits)), *decisions]

    def on_plan(self, plan: Planned) -> list[Retire]:
        return self._rungs.on_plan(plan)

    def on_result(self, result: RungResult) -> list[Retire]:
        return self._rungs.on_result(result)

    def on_exploits(self, decision: Exploits) -> None:
        self._exploited.add(decision.rung)

    def exploits(self, hparams: Mapping[str, Mapping[str, Any]],
               scores: Mapping[str, float | None], space: SearchSpace,
               rng: np.random.Generator, fits: Fits = lambda a, b: True,
               objective: Objective = ACCURACY) -> list[Exploit]:
        """The exploits of one interval's end: who copies whom, with which new values.
        ``scores``: each member's by ``objective`` (higher is better); an exploit records
        the objective's values."""
        value = objective.signed
        return [Exploit(member, donor, explore(hparams[donor], space, rng,
                                               self.perturbation_factors,
                                               self.resample_probability, fits),
                        dict(hparams[member]), value(scores.get(member)),
                        value(scores.get(donor)))
                for member, donor in pairs(scores, self.replaced(), rng)]

    @property
    def budget_name(self) -> str:
        return f"P{self.population}E{self.R}"

    def plan_title(self, brackets: int) -> str:
        return (f"{self.title}: a population of {self.population}, {self.R:g} epochs each; "
                f"every {self.interval} epochs the worst {self.replaced()} copy the best "
                f"{self.replaced()} and explore (factors {list(self.perturbation_factors)}, "
                f"resample {self.resample_probability:g}); {self.budget:g} epochs in all")

    def plan_facts(self) -> dict[str, Any]:
        return {"population": self.population, "epochs": self.R,
                "interval": self.interval, "interval_ends": self.marks,
                "replaced_per_interval": self.replaced(), "budget_epochs": self.budget,
                "explore": {"perturbation_factors": list(self.perturbation_factors),
                            "resample_probability": self.resample_probability}}


def interval_ends(epochs: int, interval: int) -> list[float]:
    """``interval``, ``2·interval``, ... up to ``epochs``, and ``epochs`` itself."""
    ends = list(range(interval, epochs + 1, interval))
    if ends[-1] != epochs:
        ends.append(epochs)
    return [float(e) for e in ends]


def replaced_count(population: int, quantile: float) -> int:
    """⌈population·quantile⌉ members, at most half of them (Ray Tune's rule)."""
    return min(math.ceil(population * quantile), population // 2)


def ranked(scores: Mapping[str, float | None]) -> list[str]:
    """Members from worst to best: a diverged member (None) first, ties by id."""
    return sorted(scores, key=lambda m: (-math.inf if scores[m] is None else scores[m], m))


def pairs(scores: Mapping[str, float | None], k: int,
          rng: np.random.Generator) -> list[tuple[str, str]]:
    """(member, donor) pairs: the ``k`` worst members and every diverged one, each with a
    donor drawn from the ``k`` best that did not diverge (none if every member diverged)."""
    order = ranked(scores)
    if k == 0 or len(order) < 2:
        return []
    best = [m for m in order if scores[m] is not None][-k:]
    worst = [m for m in order if (scores[m] is None or m in order[:k]) and m not in best]
    if not best:
        return []
    return [(m, best[int(rng.integers(len(best)))]) for m in worst]


def explore(hparams: Mapping[str, Any], space: SearchSpace, rng: np.random.Generator,
            factors: Sequence[float] = (0.8, 1.2), resample_probability: float = 0.25,
            fits: Fits = lambda a, b: True) -> dict[str, Any]:
    """A donor's values explored, in the space's order, each within its dimension: resampled
    with ``resample_probability``; else a range times a factor of ``factors`` (clipped), a
    numeric list's neighbour, a categorical choice kept. A change after which a member could
    not take the donor's state (``fits``, a structural hyper-parameter) is not made.

    Draws the same numbers from ``rng`` whatever the values, so a seed gives one sequence."""
    out = dict(hparams)
    for name, dim in space.dims.items():
        resample = rng.random() < resample_probability
        factor = float(factors[int(rng.integers(len(factors)))])
        fresh = dim.sample(rng)
        value = fresh if resample else perturb(dim, hparams[name], factor)
        candidate = {**out, name: value}
        if fits(hparams, candidate):
            out = candidate
    return out


def perturb(dim: Any, value: Any, factor: float) -> Any:
    """``value`` moved within ``dim`` in ``factor``'s direction."""
    if isinstance(dim, FloatRange):
        return float(min(max(value * factor, dim.low), dim.high))
    if isinstance(dim, IntRange):
        target = round((value * factor - dim.low) / dim.step)
        index = (value - dim.low) // dim.step
        if target == index and factor != 1:  # too small a range to move by the factor
            target = index + (1 if factor > 1 else -1)
        return dim.value(min(max(target, 0), len(dim.values) - 1))
    if isinstance(dim, Choice) and not dim.categorical and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in dim.values):
        index = dim.values.index(value) + (1 if factor > 1 else -1 if factor < 1 else 0)
        return dim.value(min(max(index, 0), len(dim.values) - 1))
    return value
