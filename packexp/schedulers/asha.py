"""Asynchronous successive halving (ASHA, Li et al. 2020): its rungs, budget and promotion
rule, as a policy. Pure Python.

Whenever a worker is free, promotions are planned first, then new configurations, and the
packs go out as workers free up, so no worker waits at a rung's end.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.errors import ConfigError, is_number, positive_int
from packexp.objectives import order, ranked
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
from packexp.schedulers.hyperband import Hyperband

if TYPE_CHECKING:
    from packexp.records.record import RungResult
    from packexp.space import SearchSpace, Trial

log = logging.getLogger(__name__)


class Asha(HalvingScheduler):
    """ASHA with promotions: a trial is promoted to the next rung as soon as it is in the top
    ``1/eta`` of its rung's results so far, and continues from its checkpoint.

    Rungs train to ``min_r * eta**k`` epochs, up to ``R`` (the top rung is ``R`` even when it
    is not such a power). New configurations are drawn while the budget lasts: at most
    ``num_configs`` of them, and never past ``max_epochs`` epochs planned in all (every
    member's epochs summed, a promotion counting those its rung adds).

    Args:
        R: Most epochs a configuration trains for.
        eta: Reduction factor: a rung promotes its top ``1/eta``.
        min_r: Epochs of the first rung.
        num_configs: Most configurations to draw; None: as many as the budget allows.
        max_epochs: Epochs the search may train; None: what synchronous Hyperband with the
            same ``R`` and ``eta`` trains, so the two compare at equal budget.
        sample_size: New configurations drawn at once when nothing is ready to promote,
            packed together by the strategy; None: the most members a pack may hold.
        continue_on_promotion, lr_horizon: As for ``Hyperband``.
    """

    budget: float  # max_epochs
    title = "ASHA"

    def __init__(self, R: int, eta: int = 3, min_r: float = 1, num_configs: int | None = None,
                 max_epochs: float | None = None, sample_size: int | None = None,
                 continue_on_promotion: bool = True, lr_horizon: str = "rung") -> None:
        super().__init__(R, eta, continue_on_promotion, lr_horizon)
        if not is_number(min_r) or not 0 < min_r <= R:
            raise ValueError(f"min_r={min_r!r}: must be a number of epochs in (0, R={R}]")
        self.num_configs = positive_int("num_configs", num_configs, optional=True)
        self.sample_size = positive_int("sample_size", sample_size, optional=True)
        if max_epochs is not None and (isinstance(max_epochs, bool)
                                       or not isinstance(max_epochs, int | float)
                                       or not max_epochs >= min_r):  # .inf: num_configs caps
            raise ValueError(f"max_epochs={max_epochs!r}: must be null or at least min_r="
                             f"{min_r}")
        self.min_r = min_r
        self.max_epochs = float(max_epochs) if max_epochs is not None else hyperband_epochs(
            Hyperband(R, eta, continue_on_promotion))
        self.budget = self.max_epochs

    @property
    def rungs(self) -> list[float]:
        """Each rung's epochs: ``min_r * eta**k`` below ``R``, then ``R``."""
        rungs, r = [], float(self.min_r)
        while r < self.R - 1e-9:
            rungs.append(r)
            r *= self.eta
        return [*rungs, float(self.R)]

    def halves(self) -> bool:
        """Whether a promotion can happen: two rungs or more, and at least ``eta``
        configurations expected in the first (the top ``1/eta`` of fewer is none)."""
        return len(self.rungs) > 1 and self.bracket().rungs[0].n >= self.eta

    def check_schedule(self) -> None:
        """Refuses an ASHA that never promotes, naming the key to change and the nearest
        value that works."""
        if self.halves():
            return
        if self.num_configs is not None and self.num_configs < self.eta:
            raise ConfigError(f"scheduler.num_configs={self.num_configs}: ASHA with eta="
                              f"{self.eta} promotes the top 1/eta of a rung, so it needs at "
                              f"least {self.eta} configurations")
        first = self.bracket().rungs[0].n
        if len(self.rungs) > 1 and self.max_epochs != self._hyperband_budget(self.R):
            per_config = sum(self.cost(k) / self.eta**k for k in range(len(self.rungs)))
            raise ConfigError(f"scheduler.max_epochs={self.max_epochs:g}: affords {first} "
                              f"configurations, fewer than eta={self.eta}, so ASHA never "
                              f"promotes; the smallest max_epochs that works is "
                              f"{math.ceil(self.eta * per_config * 1000) / 1000:g}")
        settings = {"eta": self.eta, "min_r": self.min_r, "num_configs": self.num_configs,
                    "continue_on_promotion": self.continue_on_promotion}
        smallest = next((r for r in range(math.ceil(self.min_r), 10_001)
                         if Asha(r, **settings).halves()), None)
        rungs = ", ".join(f"{r:g}" for r in self.rungs)
        raise ConfigError(f"scheduler.R={self.R}: ASHA with eta={self.eta}, min_r={self.min_r} "
                          f"never promotes (rungs of {rungs} epochs, {first} configurations "
                          f"expected in the first)"
                          + (f"; the smallest R that works is {smallest}" if smallest else ""))

    def _hyperband_budget(self, R: int) -> float:
        return hyperband_epochs(Hyperband(R, self.eta, self.continue_on_promotion))

    def bracket(self) -> Bracket:
        """The one bracket every trial belongs to; its rungs' ``n`` are expected counts: the
        configurations ``num_configs`` or the budget allows, ``1/eta`` of them promoted at each
        rung."""
        per_config = sum(self.cost(k) / self.eta**k for k in range(len(self.rungs)))
        n = self.num_configs or max(1, int(self.max_epochs / per_config))
        return Bracket(s=0, rungs=tuple(Rung(n=n // self.eta**k, r=r)
                                        for k, r in enumerate(self.rungs)))

    def brackets(self) -> list[Bracket]:
        return [self.bracket()]

    def first_draw(self, space: SearchSpace, bracket: Bracket, seed: int, drawn: Sequence[dict],
                   max_members: int) -> list[Trial]:
        """ASHA's first plan: the configurations it draws before any result, named as the
        search names them."""
        n = AshaState(self).new_configs(self.sample_size or max_members)
        trials = space.sample(n or bracket.rungs[0].n, seed, bracket.s, drawn)
        return [dataclasses.replace(t, trial_id=f"t{i:04d}") for i, t in enumerate(trials)]

    def plan_title(self, brackets: int) -> str:
        return (f"{self.title} R={self.R}, eta={self.eta}: rungs of "
                f"{', '.join(f'{r:g}' for r in self.rungs)} epochs, at most "
                f"{self.max_epochs:g} epochs in all; counts expected")

    def plan_facts(self) -> dict[str, Any]:
        log.info("scheduler=asha promotes as results arrive: the counts are expected ones, "
                 "and the packs shown are its first plan's")
        return {"asynchronous": True, "rungs_epochs": self.rungs, "max_epochs": self.max_epochs,
                "num_configs": self.num_configs}

    def cost(self, rung: int) -> float:
        """Epochs a member trains to reach ``rung`` from the rung below."""
        rungs = self.rungs
        below = rungs[rung - 1] if rung and self.continue_on_promotion else 0.0
        return rungs[rung] - below

    releases_states = True  # a promotion may come long after: it reads its checkpoint

    def start(self, search: Search) -> None:
        super().start(search)
        self.state = AshaState(self)

    def decide(self, queued: int) -> list[Decision]:
        """ASHA's plans whenever a worker is free: the promotions ready (each rung's as one
        plan the strategy packs, the highest rung first), or, if no pack is waiting, up to
        ``sample_size`` new configurations.

        Every plan is journaled before its packs train, with the configurations it drew, so a
        resume tells the policy the plans and results and trains what they lack. Under one
        worker the order of events depends on nothing else, so a resumed search ends as the
        unbroken one; under several, on which pack finishes first.
        """
        state, plans = self.state, []
        ready = state.promotions()
        for rung in sorted({k for _, k in ready}, reverse=True):
            plans.append(Plan(0, rung, tuple(i for i, k in ready if k == rung),
                              key=f"a{state.plans + len(plans):03d}-r{rung}"))
        if not queued and not plans:
            n = state.new_configs(self.sample_size or self.search.max_members)
            if n:
                plans.append(Plan(0, 0, draw=n, key=f"a{state.plans:03d}-r0"))
        return plans

    def on_plan(self, plan: Planned) -> list[Retire]:
        self.state.plan(plan.rung, plan.trial_ids, plan.drawn)
        return self._unpromotable()

    def on_result(self, result: RungResult) -> list[Retire]:
        self.state.record(result.trial_id, result.rung,
                          self.search.objective.rank_score(result))
        done = [Retire(result.trial_id, "finished")] if result.rung == self.state.top else []
        return done + self._unpromotable()

    def _unpromotable(self) -> list[Retire]:
        """The trials no budget is left to promote (their checkpoints go with them): below
        every rung whose promotion costs more than the epochs still free. A plan decided in
        the same round as another is within the budget with it, so no trial a pending plan
        promotes is among them."""
        return [Retire(trial_id, "killed") for k in range(self.state.top)
                for trial_id in self.state.closed(k)]


def hyperband_epochs(hyperband: Hyperband) -> float:
    """Epochs synchronous Hyperband trains in all: ASHA's default budget."""
    return sum(hyperband.epochs(b) for b in hyperband.brackets())


def promotable(results: Sequence[Sequence[tuple[str, float | None]]],
               promoted: Sequence[set[str]] | Mapping[int, set[str]], eta: int
               ) -> list[tuple[str, int]]:
    """The trials ASHA's ``get_job`` would promote, in the order it would, and to which rung.

    For each rung ``k`` from the top down: the top ``floor(len(results[k]) / eta)`` of its
    results so far (``top_k`` of the paper's Algorithm 2), less those promoted already, best
    first. Ties keep arrival order; failed results (None or NaN) rank last and are never
    promoted. The top rung's trials are done, so its results promote nothing.

    Args:
        results: Per rung, ``(trial_id, score)`` in the order the results arrived.
        promoted: Per rung, the trials promoted out of it.
        eta: The reduction factor.

    Returns:
        ``(trial_id, rung to train to)``, the higher rungs' first.
    """
    out = []
    for k in range(len(results) - 2, -1, -1):
        top = order([score for _, score in results[k]])[:len(results[k]) // eta]
        out += [(results[k][i][0], k + 1) for i in top
                if ranked(results[k][i][1]) and results[k][i][0] not in promoted[k]]
    return out


class AshaState:
    """What ASHA knows mid-search: each rung's results in arrival order, the trials planned
    for each rung (planned for rung ``k+1``: promoted out of rung ``k``), the epochs planned
    and the configurations drawn. A resume rebuilds it from the journal's plans and results.

    Under one objective each rung also keeps its results ranked (``Ranked``), so a decision
    costs a step per promotion ready, not a ranking of every result so far; under several
    (tuples of scores, ranked by front) ``promotable`` ranks them again at each decision.
    """

    def __init__(self, asha: Asha) -> None:
        self.asha = asha
        rungs = len(asha.rungs)
        self.results: list[list[tuple[str, float | None]]] = [[] for _ in range(rungs)]
        self.planned: list[set[str]] = [set() for _ in range(rungs)]
        self.ranked = [Ranked(asha.eta) for _ in range(rungs)]
        self.several = False  # a result scored by several goals: ranked by front
        self.spent = 0.0  # epochs planned, trained or not
        self.sampled = 0
        self.plans = 0
        self.retired = [0] * rungs  # per rung closed to promotion: its results retired so far

    @property
    def top(self) -> int:
        return len(self.results) - 1

    def promotions(self) -> list[tuple[str, int]]:
        """The promotions ready, in ``promotable``'s order, as far as the budget goes."""
        out, spent = [], self.spent
        if self.several:
            ready = promotable(self.results, self.planned[1:], self.asha.eta)
        else:
            ready = [(t, k + 1) for k in range(self.top - 1, -1, -1)
                     if spent + self.asha.cost(k + 1) <= self.asha.max_epochs + 1e-9
                     for t in self.ranked[k].ready()]
        for trial_id, rung in ready:
            if spent + self.asha.cost(rung) <= self.asha.max_epochs + 1e-9:
                out.append((trial_id, rung))
                spent += self.asha.cost(rung)
        return out

    def new_configs(self, limit: int) -> int:
        """How many new configurations to draw now: at most ``limit``, within the budget."""
        n = limit
        if self.asha.num_configs is not None:
            n = min(n, self.asha.num_configs - self.sampled)
        n = min(n, int((self.asha.max_epochs - self.spent + 1e-9) // self.asha.cost(0)))
        return max(0, n)

    def plan(self, rung: int, trial_ids: Sequence[str], drawn: int = 0) -> None:
        """Notes a plan: ``trial_ids`` to train to ``rung``, ``drawn`` of them new."""
        self.planned[rung].update(trial_ids)
        if rung:
            self.ranked[rung - 1].promoted(trial_ids)
        self.spent += self.asha.cost(rung) * len(trial_ids)
        self.sampled += drawn
        self.plans += 1

    def record(self, trial_id: str, rung: int, score: float | tuple[float, ...] | None) -> None:
        self.results[rung].append((trial_id, score))
        self.several = self.several or isinstance(score, tuple)
        if not self.several and rung < self.top:
            self.ranked[rung].add(trial_id, score, trial_id in self.planned[rung + 1])

    def closed(self, rung: int) -> list[str]:
        """The trials of ``rung`` (below the top) that no budget is left to promote and were
        not yet said: once a promotion out of ``rung`` costs more than the epochs still free,
        it always will (the epochs planned only grow), so each is said once."""
        if self.spent + self.asha.cost(rung + 1) <= self.asha.max_epochs + 1e-9:
            return []
        results, start = self.results[rung], self.retired[rung]
        self.retired[rung] = len(results)
        return [t for t, _ in results[start:] if t not in self.planned[rung + 1]]


class Ranked:
    """One rung's results ranked as ``promotable`` ranks them (higher first, ties in arrival
    order, failed results never promoted), and its top ``floor(results / eta)`` not yet
    promoted, kept as results arrive: a result moves at most one other in or out of the top.
    """

    def __init__(self, eta: int) -> None:
        self.eta = eta
        self.count = 0  # results, failed ones included: the top is a share of them
        self.order: list[tuple[float, int, str]] = []  # (-score, arrival, trial), best first
        self._ready: list[tuple[float, int, str]] = []  # in the top, not promoted, in order
        self._promoted: set[str] = set()

    def add(self, trial_id: str, score: float | None, promoted: bool = False) -> None:
        """A result; ``promoted``: its trial was planned for the next rung already."""
        if promoted:
            self._promoted.add(trial_id)
        before = self.count // self.eta
        self.count += 1
        top = self.count // self.eta
        entered: tuple[float, int, str] | None = None
        left: tuple[float, int, str] | None = None
        if score is not None and not math.isnan(score):
            entry = (-score, self.count, trial_id)
            place = bisect.bisect(self.order, entry)
            self.order.insert(place, entry)
            if place < top:
                entered = entry
                if top == before and top < len(self.order):
                    left = self.order[top]
            elif top > before:
                entered = self.order[before]
        elif top > before and before < len(self.order):
            entered = self.order[before]
        if left is not None:
            i = bisect.bisect_left(self._ready, left)
            if i < len(self._ready) and self._ready[i] == left:
                del self._ready[i]
        if entered is not None and entered[2] not in self._promoted:
            bisect.insort(self._ready, entered)

    def promoted(self, trial_ids: Sequence[str]) -> None:
        """Trials planned for the next rung: no longer ready."""
        self._promoted.update(trial_ids)
        self._ready = [e for e in self._ready if e[2] not in self._promoted]

    def ready(self) -> list[str]:
        """The top's trials not yet promoted, best first."""
        return [t for _, _, t in self._ready]
