"""Asynchronous successive halving's loop (``packexp/asha.py`` holds its rule and budget):
the driver's packs, commits and journal, planned whenever a worker is free instead of once
per rung. ``PackedSearch`` (``packexp/driver.py``) takes these methods from ``AsyncHalving``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from packexp.asha import Asha, AshaState
from packexp.events import RungPlanned
from packexp.executors import PackJob
from packexp.hyperband import Bracket
from packexp.samplers import Observation
from packexp.search_space import Trial
from packexp.strategies import RungContext, check_fits, check_partition

log = logging.getLogger(__name__)


class AsyncHalving:
    """``PackedSearch.run_asha`` and its helpers; they use the search's own state and
    methods (``_started``, ``_context``, ``commit``, ``_retire``, the book)."""

    _states: dict[str, Any]
    _keyed_plans: list[dict]
    _drawn: dict[str, Trial]
    _done: dict[tuple[int, int], dict]

    def run_asha(self, asha: Asha) -> None:
        """ASHA's loop. Whenever a worker is free: the promotions ready are planned (each rung's
        as one batch the strategy packs), or, if nothing is waiting, ``sample_size`` new
        configurations; the packs waiting go out highest rung first. Each pack is committed as
        it comes back, and the search ends when nothing is waiting, training or plannable
        within the budget.

        Every plan is journaled before its packs train, with the configurations it drew, so
        a resume replays the plans and results and trains what they lack. Under one worker
        the order of events depends on nothing else, so a resumed search ends as the unbroken
        one; under several, on which pack finishes first.
        """
        bracket = asha.bracket()
        state = AshaState(asha)
        queue = self._resume_asha(state, bracket)
        sent: dict[str, tuple[int, float | None]] = {}  # in flight: its rung, predicted time
        try:
            while True:
                while self.executor.free():
                    ready = state.promotions()
                    for rung in sorted({k for _, k in ready}, reverse=True):
                        queue += self._plan_asha(state, bracket, rung, [
                            self._drawn[i] for i, k in ready if k == rung])
                    if not queue:
                        n = state.new_configs(asha.sample_size or self.capacity.max_members or 8)
                        if n:
                            queue += self._plan_asha(state, bracket, 0, self._draw(state, n),
                                                     drawn=True)
                    # Queued jobs hold their members' states; the rest would only fill memory
                    # (a later promotion reads its checkpoint).
                    self._states.clear()
                    self._retire_unpromotable(state)
                    if not queue:
                        break
                    queue.sort(key=lambda q: -q[0])  # stable: plan order within a rung
                    rung, index, job, context = queue.pop(0)
                    sent[job.key] = rung, self._started(index, job, context)
                    self.executor.submit(job)
                if not self.executor.busy():
                    break
                job, runs = self.executor.next_done()
                rung, predicted = sent.pop(job.key)
                for part, pack_run in enumerate(runs):
                    pack_id = job.key + (f"-{part}" if len(runs) > 1 else "")
                    scores = self.commit(bracket, rung, job.epochs, pack_id, pack_run,
                                         predicted if len(runs) == 1 else None)
                    for trial_id, score in scores.items():
                        state.record(trial_id, rung, score)
                        if rung == state.top:
                            self._retire(trial_id, "finished")
        finally:
            self.executor.cancel()

    def _retire_unpromotable(self, state: AshaState) -> None:
        """Ends the trials that no budget is left to promote (their checkpoints go with
        them): below every rung whose promotion costs more than the epochs still free."""
        asha = state.asha
        for k in range(state.top):
            if state.spent + asha.cost(k + 1) <= asha.max_epochs + 1e-9:
                continue
            for trial_id, _ in state.results[k]:
                if trial_id not in state.planned[k + 1]:
                    self._retire(trial_id, "killed")

    def _draw(self, state: AshaState, n: int) -> list[Trial]:
        """``n`` new configurations from the sampler, given every result so far and none drawn
        before while the space has others; numbered ``t<i>`` in the order drawn, seeded by the
        plan that draws them."""
        history = [Observation(dict(t.hparams), r.epochs, r.val_accuracy)
                   for t in self.trials.values() for r in t.rungs if r.val_accuracy is not None]
        trials = [dataclasses.replace(t, trial_id=f"t{state.sampled + i:04d}", bracket=0)
                  for i, t in enumerate(self.sampler.sample(
                      self.space, n, self.seed, state.plans, history,
                      [t.hparams for t in self._drawn.values()]))]
        self.book.add_trials(0, trials)
        self._drawn.update((t.trial_id, t) for t in trials)
        return trials

    def _plan_asha(self, state: AshaState, bracket: Bracket, rung: int, trials: list[Trial],
                   drawn: bool = False) -> list[tuple[int, int, PackJob, RungContext]]:
        """Packs ``trials`` for ``rung`` and journals the plan; returns its packs to queue."""
        epochs = bracket.rungs[rung].r
        check_fits(trials, self.capacity, self.capacity_source)
        context = self._context(trials, epochs, bracket, rung)
        planned = self.strategy.plan(trials, self.capacity, context)
        check_partition(trials, [g for g, _ in planned], self.capacity)
        key = f"a{state.plans:03d}-r{rung}"
        state.plan(rung, [t.trial_id for t in trials], len(trials) if drawn else 0)
        log.info("%s: %d %s to %.3g epochs in %d packs", key, len(trials),
                 "new configurations" if drawn else "promotions", epochs, len(planned))
        self._emit(RungPlanned(bracket.s, rung, epochs, [g for g, _ in planned],
                               [f for _, f in planned], key=key,
                               sampled=trials if drawn else ()))
        return [(rung, j, self._job(f"{key}-p{j:02d}", bracket, rung, group, fusion), context)
                for j, (group, fusion) in enumerate(planned)]

    def _job(self, key: str, bracket: Bracket, rung: int, group: list[Trial],
             fusion: str | None) -> PackJob:
        return PackJob(key, group, bracket.rungs[rung].r,
                       {t.trial_id: self._state_for(t) for t in group}, fusion,
                       self.lr_horizon, checkpoint=self._checkpoints(bracket, rung))

    def _resume_asha(self, state: AshaState,
                     bracket: Bracket) -> list[tuple[int, int, PackJob, RungContext]]:
        """Rebuilds ASHA's state from the replayed journal: the configurations drawn, the
        plans and the results in the order they came; returns the planned packs still to
        train, with their journaled numbers."""
        for record in self._keyed_plans:
            drawn = [Trial(d["trial_id"], d["hparams"], self.space.features(d["hparams"]),
                           d["seed"], 0) for d in record["sampled"]]
            self.book.add_trials(0, drawn)
            self._drawn.update((t.trial_id, t) for t in drawn)
            state.plan(record["rung"], [i for p in record["packs"] for i in p], len(drawn))
        for (_, rung), done in self._done.items():
            for trial_id, result in done.items():
                self._restore(result)
                state.record(trial_id, rung, result.val_accuracy)
                if rung == state.top:
                    self._retire(trial_id, "finished")
        queue = []
        for record in self._keyed_plans:
            rung, done = record["rung"], self._done.get((bracket.s, record["rung"]), {})
            fusion = record.get("fusion") or [None] * len(record["packs"])
            left = [(j, [self._drawn[i] for i in pack if i not in done], f)
                    for j, (pack, f) in enumerate(zip(record["packs"], fusion, strict=True))]
            left = [(j, g, f) for j, g, f in left if g]
            if not left:
                continue
            epochs = bracket.rungs[rung].r
            context = self._context([t for _, g, _ in left for t in g], epochs, bracket, rung)
            self._emit(RungPlanned(bracket.s, rung, epochs, [g for _, g, _ in left],
                                   [f for _, _, f in left],
                                   sorted(i for p in record["packs"] for i in p if i in done),
                                   journaled=True, key=record["key"]))
            queue += [(rung, j, self._job(f"{record['key']}-p{j:02d}", bracket, rung, g, f),
                       context) for j, g, f in left]
        return queue
