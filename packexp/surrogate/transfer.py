"""The transfer (``surrogate.transfer``): a policy over another that, once the other has
decided its whole search over stand-ins, trains its ``k`` best configurations at full width
for the search's top budget, packed together, as the search's last step. Pure Python."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packexp.errors import ConfigError
from packexp.schedulers.base import (
    Bracket,
    Decision,
    Exploits,
    Plan,
    Planned,
    Retire,
    Rung,
    Scheduler,
    Search,
)
from packexp.surrogate import FULL_PREFIX, full_width

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.record import RungResult
    from packexp.space import SearchSpace, Trial

#: The transfer's bracket and its plan's key (its packs are ``transfer-p<j>``).
BRACKET, KEY = -1, "transfer"
PREFIX = FULL_PREFIX


def full_id(trial_id: str) -> str:
    return f"{PREFIX}{trial_id}"


def stand_in_id(trial_id: str) -> str | None:
    """The stand-in a full-width trial was trained for; None for a stand-in."""
    return trial_id[len(PREFIX):] if trial_id.startswith(PREFIX) else None


class Transfer(Scheduler):
    """``inner``'s search over stand-ins, then its ``k`` best configurations (by the
    objective, each at its best rung) trained from scratch at full width, with their
    stand-ins' seeds, to the inner's ``R`` epochs, in one plan the strategy packs.

    Everything the runner, the plan and the summary read of a scheduler is ``inner``'s.
    """

    def __init__(self, inner: Scheduler, k: int = 3) -> None:
        if inner.explores:
            raise ConfigError(f"surrogate.scale: scheduler {inner.title} makes exploits, so "
                              "its best is a schedule of values, not one configuration to "
                              "train at full width; use hyperband or asha")
        self.inner, self.k = inner, k
        self.R, self.continue_on_promotion = inner.R, inner.continue_on_promotion
        self.lr_horizon, self.eta = inner.lr_horizon, inner.eta
        # A capped schedule's epochs and the transfer's (a bracketed one's brackets say).
        self.budget = None if inner.budget is None else inner.budget + k * inner.R
        self.title, self.releases_states = inner.title, inner.releases_states

    def brackets(self) -> list[Bracket]:
        return [*self.inner.brackets(), Bracket(BRACKET, (Rung(self.k, float(self.R)),))]

    def start(self, search: Search) -> None:
        super().start(search)
        self.inner.start(search)
        self._trials: dict[str, Trial] = {}  # the stand-ins, in the order planned
        self._order: dict[str, int] = {}  # each one's place in that order
        self._best: dict[str, tuple[float, float, int]] = {}  # standing: score, epochs, order
        self._pending: set[tuple[str, int]] = set()  # (trial, rung) planned, not yet scored
        self._transferred = False  # the last step planned: the search has ended
        self._full: set[str] = set()  # full-width trials planned (a budget's closing ones too)
        self._closings = 0  # closing transfers planned (``on_stop``), each session's

    def decide(self, queued: int) -> list[Decision]:
        if self._transferred:
            return []
        decisions = self.inner.decide(queued)
        if decisions or queued or self._pending:
            return decisions
        plan = self._plan(KEY)
        if plan is None:  # nothing scored, or the best already trained at full width
            self._transferred = True
            return []
        return [plan]

    def on_stop(self) -> list[Decision]:
        """A budget stopped the stand-ins' search: its best so far train at full width, so
        the search still hands over a full model. A resume with a larger budget goes on with
        the stand-ins, and its last step trains those of its best not trained yet."""
        plan = None if self._transferred else self._plan(f"{KEY}-stop{self._closings + 1}")
        return [] if plan is None else [plan]

    def _plan(self, key: str) -> Plan | None:
        """The best ``k`` stand-ins scored so far, those not yet trained at full width."""
        ranked = sorted(self._best, key=self._best.__getitem__, reverse=True)[:self.k]
        given = tuple((full_id(i), full_width(dict(self._trials[i].hparams)),
                       self._trials[i].seed) for i in ranked if full_id(i) not in self._full)
        return Plan(BRACKET, 0, key=key, given=given) if given else None

    def on_plan(self, plan: Planned) -> list[Retire]:
        self._pending.update((t.trial_id, plan.rung) for t in plan.trials)
        if plan.bracket == BRACKET:
            self._full.update(t.trial_id for t in plan.trials)
            if plan.key == KEY:
                self._transferred = True
            else:
                self._closings += 1
            return []
        for t in plan.trials:
            if t.trial_id not in self._trials:
                self._trials[t.trial_id] = t
                self._order[t.trial_id] = len(self._order)
        return self.inner.on_plan(plan)

    def on_result(self, result: RungResult) -> list[Retire]:
        self._pending.discard((result.trial_id, result.rung))
        if result.bracket == BRACKET or result.trial_id.startswith(PREFIX):
            return [Retire(result.trial_id, "finished")]
        score = self.search.objective.score(result)
        if score is not None:
            standing = (score, float(result.epochs), -self._order[result.trial_id])
            if standing > self._best.get(result.trial_id, (float("-inf"), 0.0, 0)):
                self._best[result.trial_id] = standing
        return self.inner.on_result(result)

    def on_exploits(self, decision: Exploits) -> None:
        self.inner.on_exploits(decision)

    # What the plan, the checks and the records read: the inner scheduler's.

    @property
    def horizon_epochs(self) -> float | None:
        return self.inner.horizon_epochs

    def epochs(self, bracket: Bracket, continued: bool | None = None) -> float:
        return self.inner.epochs(bracket, continued)

    def first_draw(self, space: SearchSpace, bracket: Bracket, seed: int, drawn, max_members):
        if bracket.s == BRACKET:
            return []  # known once the search has run
        return self.inner.first_draw(space, bracket, seed, drawn, max_members)

    def plan_facts(self) -> dict[str, Any]:
        return {**self.inner.plan_facts(), "transfer": self.k}

    def plan_title(self, brackets: int) -> str:
        return (f"{self.inner.plan_title(brackets - 1)}, then the best {self.k} at full width")

    @property
    def budget_name(self) -> str:
        return self.inner.budget_name

    def check_space(self, space: SearchSpace) -> None:
        self.inner.check_space(space)

    def check_objective(self, objective: Objective) -> None:
        self.inner.check_objective(objective)

    def check_schedule(self) -> None:
        self.inner.check_schedule()
