"""The search a scheduler drives: configurations drawn, packed, trained and scored.

The scheduler decides (``packexp/schedulers/``); the search draws (``draws.py``), packs and
trains, keeps checkpoints (``checkpoints.py``) and resumes (``resume.py``). It records
nothing itself: what it does reaches the journal, the tracker, the progress display and the
results collector as events (``packexp/events.py``), in the order ``PackedSearch.commit``
states.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.events import (
    Event,
    Exploit,
    Listeners,
    MemberScored,
    MembersExploited,
    PackFinished,
    PackRecord,
    PackStarted,
    RungPlanned,
    RungResult,
    TrialEnded,
    TrialRecord,
)
from packexp.executors import Executor, LocalExecutor, PackJob
from packexp.interrupts import raise_if_interrupted
from packexp.listeners.results import ResultsCollector
from packexp.pack_options import steps_for
from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.draws import Draws
from packexp.runner.resume import Replayed
from packexp.samplers import Sampler
from packexp.schedulers import Bracket, KeyedPlan, Queued
from packexp.schedulers.pbt import after_exploits
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, RungContext, Strategy, check_fits, check_partition

log = logging.getLogger(__name__)


@dataclass
class PackedSearch:
    """The search a scheduler drives (``schedulers.Search``): it samples, packs, trains,
    journals and scores; the scheduler decides what and when. A synchronous scheduler calls
    ``sample`` and ``train_rung``; an asynchronous one ``draw``, ``plan``, ``dispatch`` and
    ``collect`` as workers free up.

    Every member's result and checkpoint are journaled as soon as its pack is done, so a
    resumed search (``replay``) skips them. A promoted trial continues from its checkpoint
    when ``continue_on_promotion``; otherwise it retrains from scratch. Either way its data
    order and updates are the same, so the scores are too.

    Args:
        listeners: Who hears the events; the journal first (``commit``).
        book: The trials and packs so far, kept from the events (``ResultsCollector``),
            which it hears before the listeners; the search reads each trial's last
            checkpoint and status there.
    """

    space: SearchSpace
    strategy: Strategy
    capacity: Capacity
    cache: Any  # packing.cache.PackCache
    listeners: Listeners
    checkpoints: Path
    seed: int
    tags: Mapping[str, str]
    book: ResultsCollector = field(default_factory=ResultsCollector)
    continue_on_promotion: bool = True
    lr_horizon: float | None = None  # epochs where schedules end; None: each rung's budget
    capacity_source: str = "capacity"
    probe_seconds: Callable[[], float] = lambda: 0.0  # memory probes' time so far
    train_size: int = 0  # training examples: a rung's steps per trial, for the strategy
    brackets: list = field(default_factory=list)  # the whole search, for the strategy
    executor: Executor | None = None  # where packs train; None: this process
    sampler: Sampler = field(default_factory=Sampler)  # a bracket's configurations
    started: float = field(default_factory=time.perf_counter)
    session: int = 0  # resumes before this one: started_s and elapsed_s restart each session
    first_pack_at: float | None = None  # time.time() when the first pack began
    replayed: Replayed = field(default_factory=Replayed)  # the journal a resume read
    _last: dict[int, list[str]] = field(default_factory=dict)
    _states: dict[str, Any] = field(default_factory=dict)  # trial_id -> MemberState
    _sent: dict[str, tuple[int, float | None]] = field(default_factory=dict)  # in flight
    # An exploited member's next start (its donor's state) and its step counter there.
    _starts: dict[str, tuple[Any, int]] = field(default_factory=dict)
    _probed: float = 0.0

    def __post_init__(self) -> None:
        if self.executor is None:
            self.executor = LocalExecutor().start(self.cache)
        self.store = CheckpointStore(self.checkpoints)
        self.draws = Draws(self.space, self.sampler, self.seed, self.book, self.brackets)

    def _emit(self, event: Event) -> None:
        getattr(self.book, event.handler)(event)  # the book first: the search reads it
        self.listeners.emit(event)

    @property
    def trials(self) -> dict[str, TrialRecord]:
        return self.book.trials

    @property
    def packs(self) -> list[PackRecord]:
        return self.book.packs

    def replay(self, records: list[dict]) -> int:
        """Loads a killed run's finished work from its journal (``runner.resume.Replayed``);
        returns the members found."""
        self.replayed = Replayed.of(records)
        self.book.packs.extend(self.replayed.packs)
        return self.replayed.members

    def sample(self, bracket: Bracket) -> list[Trial]:
        """``bracket``'s configurations (``Draws.bracket``)."""
        return self.draws.bracket(bracket)

    def train_rung(
        self, bracket: Bracket, rung: int, trials: list[Trial], epochs: float
    ) -> dict[str, float | None]:
        ids = [t.trial_id for t in trials]
        for dropped in set(self._last.get(bracket.s, [])) - set(ids):
            self.retire(dropped, "killed")
        self._last[bracket.s] = ids
        done = self.replayed.done.get((bracket.s, rung), {})
        for trial_id in ids:
            if trial_id in done:
                self.restore(done[trial_id])
        todo = [t for t in trials if t.trial_id not in done]
        scores = {i: done[i].val_accuracy for i in ids if i in done}
        if todo:
            scores.update(self._train(bracket, rung, todo, epochs, sorted(done)))
        if rung == len(bracket.rungs) - 1:
            for trial_id in ids:
                if self.trials[trial_id].status == "running":
                    self.retire(trial_id, "finished")
        return scores

    @property
    def max_members(self) -> int:
        """The most members a pack may hold (8 when the capacity sets no count)."""
        return self.capacity.max_members or 8

    def trial(self, trial_id: str) -> Trial:
        """A configuration ``draw`` drew (or a resume replayed)."""
        return self.draws.drawn[trial_id]

    def draw(self, n: int, salt: int, first: int) -> list[Trial]:
        """``n`` new configurations (``Draws.more``)."""
        return self.draws.more(n, salt, first)

    def plan(self, bracket: Bracket, rung: int, trials: list[Trial], key: str,
             sampled: bool = False) -> list[Queued]:
        """Packs ``trials`` for ``rung`` and journals the plan under ``key`` (with the
        configurations, when ``sampled`` drew them); returns its packs to dispatch."""
        epochs = bracket.rungs[rung].r
        planned, context = self._pack(trials, bracket, rung)
        log.info("%s: %d %s to %.3g epochs in %d packs", key, len(trials),
                 "new configurations" if sampled else "promotions", epochs, len(planned))
        self._emit(RungPlanned(bracket.s, rung, epochs, [g for g, _ in planned],
                               [f for _, f in planned], key=key,
                               sampled=trials if sampled else ()))
        return [Queued(rung, j, self._job(f"{key}-p{j:02d}", bracket, rung, group, fusion),
                       context) for j, (group, fusion) in enumerate(planned)]

    def _pack(self, trials: list[Trial], bracket: Bracket,
              rung: int) -> tuple[list[tuple[list[Trial], str | None]], RungContext]:
        """The strategy's packs of ``trials`` for ``rung``, checked, and the rung's context."""
        check_fits(trials, self.capacity, self.capacity_source)
        context = self._context(trials, bracket.rungs[rung].r, bracket, rung)
        planned = self.strategy.plan(trials, self.capacity, context)
        check_partition(trials, [g for g, _ in planned], self.capacity)
        return planned, context

    def _job(self, key: str, bracket: Bracket, rung: int, group: list[Trial],
             fusion: str | None) -> PackJob:
        return PackJob(key, group, bracket.rungs[rung].r,
                       {t.trial_id: self._state_for(t) for t in group}, fusion,
                       self.lr_horizon, checkpoint=self._checkpoints(bracket, rung))

    def free(self) -> bool:
        """Whether a worker can take a pack now."""
        return self.executor.free()

    def busy(self) -> bool:
        """Whether a dispatched pack is still to come back."""
        return self.executor.busy()

    def dispatch(self, queued: Queued) -> None:
        """Sends a planned pack to a free worker."""
        self._sent[queued.job.key] = queued.rung, self._started(queued.index, queued.job,
                                                                queued.context)
        self.executor.submit(queued.job)

    def collect(self, bracket: Bracket) -> Iterator[tuple[int, dict[str, float | None]]]:
        """Waits for the next pack to come back; commits it part by part (a pack split out of
        memory has several), yielding after each its rung and its members' scores, so the
        scheduler records and retires them before the next part is committed."""
        job, runs = self.executor.next_done()
        rung, predicted = self._sent.pop(job.key)
        for part, pack_run in enumerate(runs):
            yield rung, self.commit(bracket, rung, job.epochs,
                                    job.key + (f"-{part}" if len(runs) > 1 else ""), pack_run,
                                    predicted if len(runs) == 1 else None)

    def cancel(self) -> None:
        """Drops the packs not yet trained (the search is ending)."""
        self.executor.cancel()

    def release_states(self) -> None:
        """Forgets the end states held in memory; a later rung reads their checkpoints."""
        self._states.clear()

    def replayed_plans(self) -> list[KeyedPlan]:
        """The keyed plans of the journal a resume replayed, in journal order; the
        configurations they drew are known again (``trial``)."""
        plans = []
        for plan in self.replayed.keyed:
            drawn = self.draws.replayed(plan.sampled or ())
            plans.append(KeyedPlan(plan.rung, [i for p in plan.packs for i in p], len(drawn)))
        return plans

    def replayed_results(self) -> list[RungResult]:
        """The results a resume replayed, rung by rung in the order the journal has them."""
        return self.replayed.results

    def requeue(self, bracket: Bracket) -> list[Queued]:
        """The replayed plans' packs still to train, with their journaled numbers; each plan
        with some is told again (journaled, so not re-journaled)."""
        queue = []
        for plan, left, done in self.replayed.unfinished(bracket.s):
            left = [(j, [self.trial(i) for i in g], f) for j, g, f in left]
            epochs = bracket.rungs[plan.rung].r
            context = self._context([t for _, g, _ in left for t in g], epochs, bracket,
                                    plan.rung)
            self._emit(RungPlanned(bracket.s, plan.rung, epochs, [g for _, g, _ in left],
                                   [f for _, _, f in left], done, journaled=True,
                                   key=plan.key))
            queue += [Queued(plan.rung, j, self._job(f"{plan.key}-p{j:02d}", bracket, plan.rung,
                                                     g, f), context) for j, g, f in left]
        return queue

    def _train(self, bracket: Bracket, rung: int, todo: list[Trial], epochs: float,
               done: list[str]) -> dict[str, float | None]:
        """Plans (or reads back the journaled plan of) the rung's trials still to train,
        trains the packs and commits each as it comes back."""
        numbered = self._planned(bracket.s, rung, todo)
        journaled = numbered is not None
        if numbered is None:
            planned, context = self._pack(todo, bracket, rung)
            numbered = [(j, g, f) for j, (g, f) in enumerate(planned)]
        else:
            check_fits(todo, self.capacity, self.capacity_source)
            context = self._context(todo, epochs, bracket, rung)
        log.info("bracket %d rung %d: %d trials to %.3g epochs in %d packs%s",
                 bracket.s, rung, len(todo), epochs, len(numbered),
                 f" ({len(done)} done before the resume)" if done else "")
        self._emit(RungPlanned(bracket.s, rung, epochs, [g for _, g, _ in numbered],
                               [f for _, _, f in numbered], done, journaled))
        jobs = [self._job(f"b{bracket.s}-r{rung}-p{j:02d}", bracket, rung, group, fusion)
                for j, group, fusion in numbered]
        predicted: dict[int, float | None] = {}

        def started(k: int) -> None:
            predicted[k] = self._started(k, jobs[k], context)

        scores: dict[str, float | None] = {}
        for k, runs in self.executor.run(jobs, started):
            for part, pack_run in enumerate(runs):
                pack_id = jobs[k].key + (f"-{part}" if len(runs) > 1 else "")
                scores.update(self.commit(bracket, rung, epochs, pack_id, pack_run,
                                          predicted[k] if len(runs) == 1 else None))
        return scores

    def _started(self, index: int, job: PackJob, context: RungContext) -> float | None:
        """Tells the listeners a pack is dispatched; returns its time as the strategy predicts
        it with the caches as they stand now (None if the strategy weighs no costs)."""
        raise_if_interrupted()  # a Ctrl-C that a finalizer swallowed stops the search here
        self._emit(PackStarted(index, job.key, job.group))
        if self.first_pack_at is None:
            self.first_pack_at = time.time()
        if not self.strategy.needs_costs:
            return None
        view = self.executor.view()
        return self.strategy.predict(job.group, job.fusion, dataclasses.replace(
            context, kept=view.kept, members=view.members, replayed=view.replayed))

    def _context(self, todo: list[Trial], epochs: float, bracket: Bracket,
                 rung: int) -> RungContext:
        """What strategies that weigh costs know of the rung: each trial's steps, what the
        cache keeps, and how much of the search is still to come."""
        steps = {}
        for t in todo:
            last = self.trials[t.trial_id].last
            start = last.steps if last and self.continue_on_promotion and last.checkpoint else 0
            start = self._starts.get(t.trial_id, (None, start))[1]
            total = steps_for(epochs, int(t.hparams["batch_size"]), self.train_size or 1)
            steps[t.trial_id] = max(0, total - start)
        view = self.executor.view()  # where packs train: one cache, or each worker's
        future = sum(r.n for r in bracket.rungs[rung + 1:]) + sum(
            r.n for b in self.brackets if b.s < bracket.s for r in b.rungs)
        return RungContext(steps, view.kept, view.members,
                           checkpoint=rung + 1 < len(bracket.rungs) and self.continue_on_promotion,
                           future_trials=future,
                           structures=self.space.count_structures(self.cache.model_runtime),
                           replayed=view.replayed, model_runtime=self.cache.model_runtime,
                           bucketed=self.cache.bucketed)

    def _planned(self, bracket: int, rung: int,
                 todo: list[Trial]) -> list[tuple[int, list[Trial], str | None]] | None:
        """The journaled packs of an interrupted rung still to train, numbered as in its plan
        (``Replayed.planned``); None: plan the rung afresh."""
        by_id = {t.trial_id: t for t in todo}
        groups = self.replayed.planned(bracket, rung, by_id)
        return None if groups is None else [(j, [by_id[i] for i in g], f)
                                            for j, g, f in groups]

    def fits(self, donor: Mapping[str, Any], hparams: Mapping[str, Any]) -> bool:
        """Whether a member of ``hparams`` can take the state of one of ``donor``: both are
        of one member structure (their other values are runtime data)."""
        return (self.cache.member_key(Trial("", donor, ()))
                == self.cache.member_key(Trial("", hparams, ())))

    def replayed_exploits(self) -> dict[int, list[Exploit]]:
        """On resume: a population's journaled exploits, by the interval they end."""
        return self.replayed.exploits

    def exploit(self, bracket: Bracket, rung: int, members: list[Trial],
                exploits: list[Exploit], journaled: bool = False) -> list[Trial]:
        """Ends a population's interval ``rung``: journals ``exploits`` (unless a resume read
        them back), then makes them. Each exploited member starts the next rung from its
        donor's end state, written to its own checkpoint first so that a resume starts it
        there too, with its step counter at the start of the next epoch for its new batch
        size; it trains on with the exploit's values and the donor's data order (its seed),
        so with the donor's values it would train exactly as the donor. Returns the members
        as the next rung trains them."""
        after = after_exploits(members, exploits, self.space)
        epochs = bracket.rungs[rung].r
        self._emit(MembersExploited(bracket.s, rung, epochs, tuple(exploits),
                                    {t.trial_id: dict(t.hparams) for t in after}, journaled))
        from packexp.packing.member import read_state

        before = {t.trial_id: t.hparams for t in members}
        done = self.replayed.done.get((bracket.s, rung + 1), {})
        for e in (e for e in exploits if e.member not in done):
            step = steps_for(epochs, int(e.hparams["batch_size"]), self.train_size)
            start = self.store.donor_start(
                e.member, rung, e.donor,
                lambda d=e.donor: self._states.get(d) or read_state(self.trials[d].last.checkpoint),
                step, before[e.donor].get("optimizer") != e.hparams.get("optimizer"))
            self._starts[e.member] = (start, step)  # in memory: a Ray worker may not see path
        return after

    def finish(self) -> None:
        for trial_id, record in self.trials.items():
            if record.status == "running":
                self.retire(trial_id, "killed")

    def best(self) -> dict | None:
        return self.book.best()

    def _state_for(self, trial: Trial) -> Any:
        """The trial's starting state for this rung: None to start afresh, else the state it
        ended its last rung in: kept in memory, or the path of its checkpoint (after a
        resume, or written by a worker), which whoever trains the pack reads."""
        if trial.trial_id in self._starts:
            return self._starts[trial.trial_id][0]
        last = self.trials[trial.trial_id].last
        if not (last and self.continue_on_promotion and last.checkpoint):
            return None  # a failed member keeps no checkpoint: it starts again, as it did
        return self._states.get(trial.trial_id, last.checkpoint)

    def _checkpoints(self, bracket: Bracket, rung: int) -> bool:
        """Whether the rung's end states are continued from (by the next rung)."""
        return self.continue_on_promotion and rung + 1 < len(bracket.rungs)

    def commit(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
               pack_run: Any, predicted_s: float | None = None) -> dict[str, float | None]:
        """Makes a trained pack durable and tells the listeners, in the order that lets a
        search killed at any instant resume to the numbers of an unbroken one:

        1. each member's end state is written to disk (``write_state`` renames a complete
           file into place) before any journal record names it;
        2. each member's result is journaled (``MemberScored``; the journal is the first
           listener, one fsynced line per record) before the pack record (``PackFinished``);
           a pack whose record is missing is trained again on resume;
        3. a trial's checkpoint of the rung before (and a population's copy of its donor's
           state) is deleted only after the pack record is journaled, which makes the
           result naming its new one the result a resume reads; a diverged member is retired
           (its checkpoints deleted) only then too.

        The rung's plan was journaled (``RungPlanned``) before its first pack trained.
        """
        members = pack_run.members
        t0 = time.perf_counter()
        checkpoints: dict[str, str | None] = {}
        exploited = {m.trial_id for m in members if self._starts.pop(m.trial_id, None)}
        for m in members:
            self._states.pop(m.trial_id, None)
            checkpoints[m.trial_id] = m.checkpoint  # a worker's, already durable
            if m.state is not None and not m.failed and self._checkpoints(bracket, rung):
                checkpoints[m.trial_id] = self.store.write(m.state, m.trial_id, rung)
                self._states[m.trial_id] = m.state  # the next rung reads the memory copy
        pack = self._record(bracket, rung, epochs, pack_id, pack_run, predicted_s,
                            time.perf_counter() - t0, self._spent(members, epochs, exploited))
        scores: dict[str, float | None] = {}
        stale: list[Path] = []
        for m in members:
            ev = pack_run.evaluation[m.trial_id]
            result = RungResult(
                m.trial_id, bracket.s, rung, epochs, m.step, ev.val_accuracy, ev.val_loss,
                m.train_loss if m.train_loss is not None and math.isfinite(m.train_loss)
                else None, pack_id, checkpoints[m.trial_id], m.failed)
            before = self.trials[m.trial_id].last
            self._emit(MemberScored(result, m.trial, pack, self.tags,
                                    before.pack_id if before else None,
                                    round(self.capacity.cost(m.trial) / 2**20, 2)))
            stale += self.store.superseded(m.trial_id, rung, before and before.checkpoint,
                                           result.checkpoint)
            scores[m.trial_id] = ev.val_accuracy
        best = self.best()
        self._emit(PackFinished(pack, len(self.packs), best["val_accuracy"] if best else None,
                                round(sum(p.epochs_spent for p in self.packs) + pack.epochs_spent,
                                      4)))
        self.store.delete(stale)
        for m in members:
            if m.failed:
                self.retire(m.trial_id, "failed")
        return scores

    def _spent(self, members: list, epochs: float, exploited: set[str]) -> float:
        """Epochs the members trained in this pack: a continued trial only those its rung
        adds, one trained from scratch all of them (as ``_state_for`` started it); a
        population's ``exploited`` member those from its donor's state on."""
        spent = 0.0
        for m in members:
            last = self.trials[m.trial_id].last
            continued = last and ((self.continue_on_promotion and last.checkpoint)
                                  or m.trial_id in exploited)
            spent += epochs - (last.epochs if continued else 0.0)
        return round(spent, 4)

    def _record(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
                pack_run: Any, predicted_s: float | None, checkpoint_s: float,
                epochs_spent: float) -> PackRecord:
        """The pack's record: its members, settings and time by phase."""
        probed = self.probe_seconds()
        probe_s, self._probed = probed - self._probed, probed
        return PackRecord.measured(
            pack_run, pack_id, bracket.s, rung, epochs, predicted_s=predicted_s,
            checkpoint_s=checkpoint_s, probe_s=probe_s, epochs_spent=epochs_spent,
            planned_cost_bytes=sum(self.capacity.cost(m.trial) for m in pack_run.members),
            search_started=self.started, session=self.session)

    def restore(self, result: RungResult) -> None:
        """A result journaled before the resume, back in the book (nothing re-journaled). A
        diverged trial ends again, its files left alone: they went when it diverged, and a
        population's member may have trained on since from a donor's state."""
        self.book.record(result)
        if result.failed and self.trials[result.trial_id].status == "running":
            self._emit(TrialEnded(result.trial_id, "failed"))

    def retire(self, trial_id: str, status: str) -> None:
        """Ends a trial as ``status`` (finished, killed, failed); its checkpoints go."""
        record = self.trials[trial_id]
        if record.status != "running":
            return
        self._emit(TrialEnded(trial_id, status))
        self.store.retire(trial_id, [r.checkpoint for r in record.rungs])
        self._states.pop(trial_id, None)

