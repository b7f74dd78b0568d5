"""The runner: one loop for every scheduler. It asks the policy (``packexp/schedulers/``),
draws (``draws.py``), packs (``packs.py``), trains and commits (``ledger.py``) what it plans,
and tells the policy each result; a resume tells it the journal's facts first (``replay.py``).
What it does reaches the journal, tracker, display and results as events (``events.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packexp.events import Event, Listeners
from packexp.executors import Executor
from packexp.objectives import Objective
from packexp.records.best import Best
from packexp.records.record import PackRecord, PlanRecord, RungResult, TrialRecord
from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.dispatch import Dispatch
from packexp.runner.draws import Draws
from packexp.runner.keep import KeepModels
from packexp.runner.ledger import Ledger
from packexp.runner.packs import Packer, Queued, most_members
from packexp.runner.replay import Replayed
from packexp.runner.settings import SearchClock, SearchContext, SearchSettings
from packexp.runner.study import Study
from packexp.samplers import Sampler
from packexp.schedulers.base import (
    Bracket,
    Decision,
    Exploits,
    Plan,
    Planned,
    Retire,
    Scheduler,
    continued,
)
from packexp.space import SearchSpace, Trial
from packexp.strategies import Capacity, Strategy
from packexp.surrogate import is_full

log = logging.getLogger(__name__)


@dataclass
class PackedSearch:
    """The search a policy decides (``schedulers.Search``): it draws, packs, trains, and
    writes each event to its study before the listeners hear it; the policy decides what and
    when (``run``).

    Args:
        executor: Where packs train, started with the driver's pack cache; its trainer
            (``executors.Trainer``) keeps the checkpoints.
        study: The search's record (``study.py``): its journal, trials and packs, and a
            resume's journal read back. Checkpoints go to its run directory's
            ``checkpoints/``.
        listeners: Who hears the events, after the study has them.
        started: ``time.perf_counter()``: the search's clock until its first pack is sent,
            which restarts it (``searched_s``).
    """

    space: SearchSpace
    strategy: Strategy
    capacity: Capacity
    executor: Executor
    study: Study
    listeners: Listeners = field(default_factory=lambda: Listeners([]))
    settings: SearchSettings = field(default_factory=SearchSettings)
    sampler: Sampler = field(default_factory=Sampler)  # a bracket's configurations
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        # One context every part reads, and the few objects that own state (the study, the
        # store, the ledger, the clock), handed to the parts that change them.
        self.context = SearchContext(self.space, self.strategy, self.capacity, self.settings)
        self.study.leaders.widen(self.settings.keep.top_k)  # the kept models, ranked as they come
        if (surrogate := self.settings.surrogate).on:  # the stand-ins only choose the transfer's
            self.study.leaders.admits = lambda i: is_full(self.study.trials[i].hparams, surrogate)
        self.brackets: tuple[Bracket, ...] = ()  # the whole search (``run`` sets them)
        self.stopped: str | None = None  # why the search stopped early; None: to its end
        self._current: dict[str, Trial] = {}  # each trial as it trains next
        self._members: dict[tuple[int, int], list[str]] = {}  # rung -> its plan's trials
        self._keyed = 0  # keyed plans so far: the next one's draw is seeded by this number
        self.clock = SearchClock(self.started)
        self.store = CheckpointStore(self.study.run_dir / "checkpoints", self.executor.trainer)
        self.ledger = Ledger(self.study, self._emit, self.store, self.context, self.clock)
        self.draws = Draws(self.context, self.sampler, self.study)
        self.packer = Packer(self.context, self.executor.cache, self.ledger, self._emit,
                             self.executor.view)
        self.dispatch = Dispatch(self.executor, self.ledger, self.packer, self._emit,
                                 self.clock)

    @property
    def cache(self) -> Any:
        """The driver's pack cache (``packing.cache.PackCache``), the executor's."""
        return self.executor.cache

    @property
    def seed(self) -> int:
        """The run's root seed (``schedulers.Search``)."""
        return self.settings.seed

    @property
    def replayed(self) -> Replayed:
        return self.study.replayed

    @property
    def keep(self) -> KeepModels:
        return self.settings.keep

    @property
    def first_pack_at(self) -> float | None:
        """``time.time()`` when the first pack began; None before."""
        return self.clock.first_pack_at

    def searched_s(self) -> float:
        """Seconds searched, every session counted: this session's from its first pack on
        (what came before it, the calibration and the first plan's probes included, is
        start-up, not search), and the sessions' before. ``budget.time_s`` counts these, and
        they are ``results.json``'s ``wall_time_s``, which ``startup_s`` adds up with."""
        if self.first_pack_at is None:
            return self.study.earlier_s
        return self.study.earlier_s + max(0.0, self.executor.clock() - self.clock.started)

    @property
    def objective(self) -> Objective:
        """What the search tunes for: the study's, which ranks the best by it too."""
        return self.study.objective

    def _emit(self, event: Event) -> None:
        self.study.write(event)  # journaled and kept first: the search reads it back
        self.listeners.emit(event)

    @property
    def trials(self) -> dict[str, TrialRecord]:
        return self.study.trials

    @property
    def packs(self) -> list[PackRecord]:
        return self.study.packs

    @property
    def max_members(self) -> int:
        """The most members a pack may hold (8 when the capacity sets no count)."""
        return most_members(self.capacity)

    def run(self, policy: Scheduler) -> None:
        """Runs the search ``policy`` decides, to its end: a resume's facts told first (its
        plans' packs left queued); then, whenever a worker is free, the policy's decisions
        carried out in order, the highest rung's packs sent first, each pack committed as it
        comes back (a synchronous rung's in plan order) and its results told to the policy,
        until nothing waits or trains and the policy plans nothing more; a search its budget
        stopped then carries out the policy's closing step (``on_stop``)."""
        self.brackets = tuple(policy.brackets())
        policy.start(self)
        queue = self._replay_into(policy)
        closing: list[Decision] = []  # a stopped search's closing step (Scheduler.on_stop)
        try:
            while True:
                while self.executor.free():
                    decisions = [] if closing else policy.decide(len(queue))
                    if not closing and (decisions or queue) and (
                            stop := self.settings.budget.out_of_time(self.searched_s())):
                        self.stopped = stop  # the packs in flight finish; nothing new starts
                        break
                    made = self._carry_out(decisions, policy, queue)
                    if policy.releases_states:  # queued packs hold their members' states
                        self.ledger.states.clear()
                    if queue:
                        queue.sort(key=lambda q: -q.rung)  # stable: plan order within a rung
                        self.dispatch.send(queue.pop(0))
                    elif not made:
                        break
                if not self.executor.busy():
                    if not self.stopped or closing or not (closing := policy.on_stop()):
                        break
                    queue.clear()  # the stopped search's own packs wait for a resume
                    self._carry_out(closing, policy, queue)
                    continue
                for result in self.dispatch.collect():
                    self._carry_out(policy.on_result(result), policy, queue)
        finally:
            self.executor.cancel()

    def _carry_out(self, decisions: Sequence[Decision], policy: Scheduler,
                   queue: list[Queued]) -> bool:
        """Carries ``decisions`` out in order, telling ``policy`` each plan and exploit made;
        returns whether any was."""
        made = False
        for decision in decisions:
            if isinstance(decision, Retire):
                self.ledger.retire(decision.trial_id, decision.status)
                continue
            if isinstance(decision, Plan) and decision.draw and (
                    stop := self.settings.budget.refuses_draw(len(self.study.trials),
                                                              decision.draw)):
                self.stopped = stop  # what was promised trains on; nothing new is drawn
                return made
            made = True
            if isinstance(decision, Exploits):
                self._exploit(decision)
                policy.on_exploits(decision)
            else:
                planned, queued = self._plan(decision)
                queue += queued
                self._carry_out(policy.on_plan(planned), policy, queue)
        return made

    def _replay_into(self, policy: Scheduler) -> list[Queued]:
        """Tells ``policy`` the resumed journal's facts in the order they happened, each
        result back in the study and each exploit's start prepared (nothing re-journaled);
        returns the journaled plans' packs still to train."""
        for fact in self.replayed.facts:
            if isinstance(fact, PlanRecord):
                self._retire(policy.on_plan(self._replanned(fact)))
            elif isinstance(fact, RungResult):
                self.ledger.restore(fact)
                self._retire(policy.on_result(fact))
            else:
                self._exploit(fact, journaled=True)
                policy.on_exploits(fact)
        return self.packer.requeue(self.replayed.unfinished(), self._current, self.brackets)

    def _retire(self, decisions: Sequence[Decision]) -> None:
        """A replayed fact's retirements (a policy decides its plans in ``decide``)."""
        for decision in decisions:
            if not isinstance(decision, Retire):
                raise TypeError(f"on_plan and on_result return Retire decisions, not {decision}")
            self.ledger.retire(decision.trial_id, decision.status)

    def _replanned(self, plan: PlanRecord) -> Planned:
        """A journaled plan, its configurations known again: those it drew (``sampled``), or
        for a synchronous bracket's first rung, the bracket's draw, which is the seed's."""
        ids = [i for pack in plan.packs for i in pack]
        if plan.sampled is not None:
            drawn = self._known(self.draws.replayed(plan.sampled))
        elif any(i not in self._current for i in ids):
            drawn = self._known(self.draws.bracket(self._bracket(plan.bracket), self.brackets))
        else:
            drawn = []
        if plan.key is not None:
            self._keyed += 1
        trials = drawn if drawn and plan.key is None else [self._current[i] for i in ids]
        self._members[(plan.bracket, plan.rung)] = [t.trial_id for t in trials]
        return Planned(plan.bracket, plan.rung, tuple(trials), len(drawn), plan.key)

    def _bracket(self, s: int) -> Bracket:
        return next(b for b in self.brackets if b.s == s)

    def _known(self, trials: list[Trial]) -> list[Trial]:
        self._current.update((t.trial_id, t) for t in trials)
        return trials

    def _plan(self, plan: Plan) -> tuple[Planned, list[Queued]]:
        """Carries a plan out: draws what it draws, packs its trials with the strategy and
        journals the plan before any pack trains; returns it as made, and its packs."""
        bracket = self._bracket(plan.bracket)
        drawn: list[Trial] = []
        if plan.draw and plan.key is None and (plan.rung, plan.draw) != (0, bracket.rungs[0].n):
            raise ValueError(f"{plan}: a synchronous plan draws only its bracket's first rung, "
                             f"{bracket.rungs[0].n} configurations")
        if plan.given and plan.key is None:
            raise ValueError(f"{plan}: only a keyed plan starts given configurations")
        if plan.draw:
            drawn = self._known(self.draws.bracket(bracket, self.brackets) if plan.key is None else
                                self.draws.more(plan.draw, self._keyed, len(self.draws.drawn)))
        if plan.given:
            drawn += self._known(self.draws.given(plan.given))
        if plan.key is not None:
            self._keyed += 1
        trials = [self._current[i] for i in plan.trial_ids] + drawn
        self._members[(bracket.s, plan.rung)] = [t.trial_id for t in trials]
        made = Planned(bracket.s, plan.rung, tuple(trials), len(drawn), plan.key)
        if not trials:
            return made, []
        planned, context = self.packer.pack(trials, bracket, plan.rung, self.brackets)
        return made, self.packer.announce(plan.key, bracket, plan.rung, [
            (j, g, f) for j, (g, f) in enumerate(planned)], context, sampled=drawn)

    def fits(self, donor: Mapping[str, Any], hparams: Mapping[str, Any]) -> bool:
        """Whether a member of ``hparams`` can take the state of one of ``donor``: both are
        of one member structure (their other values are runtime data)."""
        return (self.cache.member_key(Trial("", donor, ()))
                == self.cache.member_key(Trial("", hparams, ())))

    def _exploit(self, decision: Exploits, journaled: bool = False) -> None:
        """Carries a population's exploits out (``Ledger.exploit``)."""
        members = [self._current[i] for i in self._members[(decision.bracket, decision.rung)]]
        after = self._known(continued(members, decision.exploits, self.space))
        done = self.replayed.done.get((decision.bracket, decision.rung + 1), {})
        self.ledger.exploit(decision, self._bracket(decision.bracket).rungs[decision.rung].r,
                            members, after, done, journaled)

    def finish(self) -> None:
        self.ledger.finish()

    def best(self) -> Best | None:
        return self.study.best()
