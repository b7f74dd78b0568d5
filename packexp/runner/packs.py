"""A plan carried out as packs: the strategy's packs of a rung's trials, checked (a resumed
plan's: those still to train, queued again); what the strategy knows of the rung as it packs
(``RungContext``); each pack's job, with its members' starting states; and its time as the
strategy predicts it when it is sent. Pure Python."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packexp.events import Event, PlanRecord, RungPlanned
from packexp.executors import CacheView, PackJob
from packexp.runner.ledger import Ledger
from packexp.runner.settings import SearchContext
from packexp.schedulers.base import Bracket
from packexp.space import Trial
from packexp.space.options import steps_for
from packexp.strategies import (
    Capacity,
    RungContext,
    Strategy,
    WeighsCosts,
    check_fits,
    check_partition,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    """A planned pack waiting for a worker: its plan (by name) and number there, its rung and
    job, the rung's context (for the strategy's prediction when it is dispatched), and whether
    its plan's packs are committed in plan order (a synchronous rung's)."""

    plan: str
    index: int
    bracket: Bracket
    rung: int
    job: PackJob
    context: RungContext
    ordered: bool


@dataclass
class Packer:
    """Packs a plan's trials for the search (``PackedSearch``) with its context's strategy,
    within its capacity, for the place packs train (``views``: what its caches keep now,
    which the strategy may weigh: ``Executor.view``)."""

    context: SearchContext
    cache: Any  # packing.cache.PackCache
    ledger: Ledger
    emit: Callable[[Event], None]  # the search's: the study first, then the listeners
    views: Callable[[], CacheView]

    @property
    def strategy(self) -> Strategy:
        return self.context.strategy

    @property
    def capacity(self) -> Capacity:
        return self.context.capacity

    def queued(self, key: str | None, bracket: Bracket, rung: int,
               packs: list[tuple[int, list[Trial], str | None]],
               context: RungContext) -> list[Queued]:
        """A plan's packs (each with its number in the plan) ready to send: named
        ``<plan>-p<j>``, where a synchronous rung's plan (``key`` None) is ``b<s>-r<rung>``."""
        name = key or f"b{bracket.s}-r{rung}"
        return [Queued(name, j, bracket, rung, self.job(f"{name}-p{j:02d}", bracket, rung,
                                                          group, fusion), context, key is None)
                for j, group, fusion in packs]

    def announce(self, key: str | None, bracket: Bracket, rung: int,
                 packs: list[tuple[int, list[Trial], str | None]], context: RungContext,
                 done: Sequence[str] | None = None,
                 sampled: Sequence[Trial] = ()) -> list[Queued]:
        """Journals a plan's packs (``RungPlanned``) before any trains, unless the plan is a
        resumed one (``done``: its members trained before the resume), which the journal has
        already; returns them, ready to send."""
        epochs = bracket.rungs[rung].r
        log.info("%s: %d trials to %.3g epochs in %d packs%s",
                 key or f"bracket {bracket.s} rung {rung}", sum(len(g) for _, g, _ in packs),
                 epochs, len(packs),
                 "" if done is None else f" ({len(done)} done before the resume)")
        self.emit(RungPlanned(bracket.s, rung, epochs, [g for _, g, _ in packs],
                              [f for _, _, f in packs], done or (), journaled=done is not None,
                              key=key,
                              sampled=sampled if key is not None else ()))
        return self.queued(key, bracket, rung, packs, context)

    def pack(self, trials: list[Trial], bracket: Bracket, rung: int,
             brackets: Sequence[Bracket] = ()) -> tuple[list[tuple[list[Trial], str | None]],
                                                       RungContext]:
        """The strategy's packs of ``trials`` for ``rung``, checked, and the rung's context
        (``brackets``: the search's, for how much of it is still to come)."""
        context = self.rung_context(trials, bracket, rung, brackets)
        return form_packs(self.context, trials, context), context

    def requeue(self, unfinished: Sequence[tuple[PlanRecord,
                                                 list[tuple[int, list[str], str | None]],
                                                 list[str]]],
                current: Mapping[str, Trial], brackets: Sequence[Bracket]) -> list[Queued]:
        """A resume's plans that still have packs to train (``Replayed.unfinished``), those
        packs with their journaled numbers and their members as they train next (``current``);
        each plan with some is told again (journaled, so not re-journaled)."""
        queue = []
        for plan, left, done in unfinished:
            bracket = next(b for b in brackets if b.s == plan.bracket)
            left = [(j, [current[i] for i in g], f) for j, g, f in left]
            todo = [t for _, g, _ in left for t in g]
            check_fits(todo, self.capacity, self.context.settings.capacity_source)
            context = self.rung_context(todo, bracket, plan.rung, brackets)
            queue += self.announce(plan.key, bracket, plan.rung, left, context, done)
        return queue

    def job(self, key: str, bracket: Bracket, rung: int, group: list[Trial],
            fusion: str | None) -> PackJob:
        # A worker writes its members' end states where they continue or may be kept.
        return PackJob(key, group, bracket.rungs[rung].r,
                       {t.trial_id: self.ledger.state_for(t) for t in group}, fusion,
                       self.context.settings.lr_horizon,
                       checkpoint=self.ledger.continues(bracket, rung) or self.ledger.keep.keeps)

    def predict(self, job: PackJob, context: RungContext) -> float | None:
        """The pack's time as the strategy predicts it with the caches as they stand now (None
        if the strategy weighs no costs)."""
        if not isinstance(self.strategy, WeighsCosts):
            return None
        view = self.views()
        return self.strategy.predict(job.group, job.fusion, dataclasses.replace(
            context, kept=view.kept, members=view.members, replayed=view.replayed))

    def rung_context(self, todo: list[Trial], bracket: Bracket, rung: int,
                     brackets: Sequence[Bracket]) -> RungContext:
        """What strategies that weigh costs know of the rung (``rung_context``), where packs
        train now and each trial starting where the ledger has it."""
        return rung_context(self.context, self.cache, self.views(), todo, bracket, rung,
                            brackets, self.ledger.start_step)


def most_members(capacity: Capacity) -> int:
    """The most members a pack may hold: the capacity's count, else 8 (an asynchronous
    scheduler's draws at once, by default)."""
    return capacity.max_members or 8


def form_packs(context: SearchContext, trials: list[Trial],
               rung: RungContext) -> list[tuple[list[Trial], str | None]]:
    """The packs ``context``'s strategy forms of ``trials`` within its capacity, checked: what
    a search trains and what ``task=plan`` shows."""
    check_fits(trials, context.capacity, context.settings.capacity_source)
    planned = context.strategy.plan(trials, context.capacity, rung)
    check_partition(trials, [g for g, _ in planned], context.capacity)
    return planned


def rung_context(context: SearchContext, cache: Any, view: CacheView, todo: list[Trial],
                 bracket: Bracket, rung: int, brackets: Sequence[Bracket],
                 start_step: Callable[[str], int] = lambda trial_id: 0) -> RungContext:
    """What strategies that weigh costs know of ``bracket``'s ``rung``: each trial's steps
    from where it starts (``start_step``: 0 for a fresh one), what the caches where packs
    train keep (``view``; ``cache``: the driver's, for its structures), and how much of the
    search (``brackets``, in the order they run) is still to come."""
    settings, epochs = context.settings, bracket.rungs[rung].r
    steps = {}
    for t in todo:
        total = steps_for(epochs, t.batch_size, settings.train_size or 1)
        steps[t.trial_id] = max(0, total - start_step(t.trial_id))
    future = sum(r.n for r in bracket.rungs[rung + 1:]) + sum(
        r.n for b in brackets if b.s < bracket.s for r in b.rungs)
    return RungContext(steps, view.kept, view.members,
                       checkpoint=rung + 1 < len(bracket.rungs)
                       and settings.continue_on_promotion,
                       future_trials=future,
                       structures=context.space.count_structures(cache.model_runtime),
                       replayed=view.replayed, model_runtime=cache.model_runtime,
                       bucketed=cache.bucketed)
