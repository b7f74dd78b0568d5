"""The ledger: what a search has made durable, and in which order. Each trained pack's
members' end states and results, its record, and each trial's end, told to the listeners (the
journal first) so that a search killed at any instant resumes to the numbers of an unbroken
one; and the states a trial starts its next rung from. Pure Python (``CheckpointStore``
writes a state through the search's trainer).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.events import Event, MemberScored, MembersExploited, PackFinished, TrialEnded
from packexp.records.record import PackRecord, RungResult
from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.keep import KeepModels
from packexp.runner.settings import SearchClock, SearchContext
from packexp.runner.study import Study
from packexp.schedulers.base import Bracket, Exploits
from packexp.space import Trial
from packexp.space.options import steps_for


@dataclass
class Ledger:
    """A search's durable record: results and packs through the events (``emit``: the study
    first, then the listeners), checkpoint files through ``store``.

    Attributes:
        states: Each trial's end state of its last rung, while kept in memory.
        starts: An exploited member's next start (its donor's state) and its step counter
            there.
    """

    study: Study
    emit: Callable[[Event], None]
    store: CheckpointStore
    context: SearchContext  # the capacity packs were planned in, the tags, what is kept
    clock: SearchClock = field(default_factory=SearchClock)  # the search's: packs' times
    states: dict[str, Any] = field(default_factory=dict)
    starts: dict[str, tuple[Any, int]] = field(default_factory=dict)
    _probed: float = 0.0

    @property
    def continue_on_promotion(self) -> bool:
        return self.context.settings.continue_on_promotion

    @property
    def keep(self) -> KeepModels:
        """Whose trained weights the search hands over."""
        return self.context.settings.keep

    def start_step(self, trial_id: str) -> int:
        """The step ``trial_id`` starts its next rung from: its last rung's, where it
        continues from that checkpoint; an exploited member's, from its donor's; else 0."""
        last = self.study.trials[trial_id].last
        start = last.steps if last and self.continue_on_promotion and last.checkpoint else 0
        return self.starts.get(trial_id, (None, start))[1]

    @property
    def _sizes_ranked(self) -> set[str]:
        """``params`` and ``flops`` where the objective ranks by them (recorded only then)."""
        return {name for name, _ in self.study.objective.goals} & {"params", "flops"}

    def finish(self) -> None:
        """Ends the trials still running as ``killed``: the search is over."""
        for trial_id, record in self.study.trials.items():
            if record.status == "running":
                self.retire(trial_id, "killed")


    def state_for(self, trial: Trial) -> Any:
        """The trial's starting state for this rung: None to start afresh, else the state it
        ended its last rung in: kept in memory, or the path of its checkpoint (after a
        resume, or written by a worker), which whoever trains the pack reads."""
        if trial.trial_id in self.starts:
            return self.starts[trial.trial_id][0]
        last = self.study.trials[trial.trial_id].last
        if not (last and self.continue_on_promotion and last.checkpoint):
            return None  # a failed member keeps no checkpoint: it starts again, as it did
        return self.states.get(trial.trial_id, last.checkpoint)

    def continues(self, bracket: Bracket, rung: int) -> bool:
        """Whether the rung's end states are continued from (by the next rung)."""
        return self.continue_on_promotion and rung + 1 < len(bracket.rungs)

    def commit(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
               pack_run: Any, predicted_s: float | None = None) -> list[RungResult]:
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
        exploited = {m.trial_id for m in members if self.starts.pop(m.trial_id, None)}
        for m in members:
            self.states.pop(m.trial_id, None)
            checkpoints[m.trial_id] = m.checkpoint  # a worker's, already durable
            if m.state is not None and not m.failed and self.continues(bracket, rung):
                checkpoints[m.trial_id] = self.store.write(m.state, m.trial_id, rung)
                self.states[m.trial_id] = m.state  # the next rung reads the memory copy
        results = [self._result(m, pack_run.evaluation[m.trial_id], bracket, rung, epochs,
                                pack_id, checkpoints[m.trial_id]) for m in members]
        self._keep(members, results)
        pack = self._record(bracket, rung, epochs, pack_id, pack_run, predicted_s,
                            time.perf_counter() - t0, self._spent(members, epochs, exploited))
        stale: list[Path] = []
        for m, result in zip(members, results, strict=True):
            before = self.study.trials[m.trial_id].last
            self.emit(MemberScored(result, m.trial, pack, self.context.settings.tags,
                                    before.pack_id if before else None,
                                    round(self.context.capacity.cost(m.trial) / 2**20, 2)))
            stale += self.store.superseded(m.trial_id, rung, before and before.checkpoint,
                                           result.checkpoint)
        best, packs = self.study.best(), self.study.packs
        self.emit(PackFinished(pack, len(packs), best.value if best else None,
                               round(self.study.epochs_spent + pack.epochs_spent, 4),
                               self.study.objective.metric))
        self.store.delete(stale)
        if self.keep.keeps:  # journaled: the states that no longer count go
            self.store.drop_kept(*self.keep.wanted(self.study,
                                                   [m.trial_id for m in members]))
        for m in members:
            if m.failed:
                self.retire(m.trial_id, "failed")
        return results

    def _result(self, m: Any, ev: Any, bracket: Bracket, rung: int, epochs: float,
                pack_id: str, checkpoint: str | None) -> RungResult:
        return RungResult(
            m.trial_id, bracket.s, rung, epochs, m.step, ev.val_accuracy, ev.val_loss,
            m.train_loss if m.train_loss is not None and math.isfinite(m.train_loss)
            else None, pack_id, checkpoint, m.failed,
            getattr(ev, "val_mse", None), getattr(ev, "val_mae", None),
            getattr(ev, "val_r2", None),
            *(getattr(ev, k, None) if k in self._sizes_ranked else None
              for k in ("params", "flops")), getattr(ev, "extra", None))

    def _keep(self, members: Sequence[Any], results: Sequence[RungResult]) -> None:
        """Writes the states of the pack's results that ``keep`` may hand over as models,
        before the journal names the results (so a resumed search finds them)."""
        if not self.keep.keeps:
            return
        by_id = {m.trial_id: m for m in members}
        for result in self.keep.candidates(self.study, results):
            m = by_id[result.trial_id]
            state = m.state if m.state is not None else (
                self.store.read(m.checkpoint) if m.checkpoint else None)
            if state is not None and not m.failed:
                self.store.keep(state, result.trial_id, result.rung)

    def _spent(self, members: list, epochs: float, exploited: set[str]) -> float:
        """Epochs the members trained in this pack: a continued trial only those its rung
        adds, one trained from scratch all of them (as ``_state_for`` started it); a
        population's ``exploited`` member those from its donor's state on."""
        spent = 0.0
        for m in members:
            last = self.study.trials[m.trial_id].last
            continued = last and ((self.continue_on_promotion and last.checkpoint)
                                  or m.trial_id in exploited)
            spent += epochs - (last.epochs if continued else 0.0)
        return round(spent, 4)

    def _record(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
                pack_run: Any, predicted_s: float | None, checkpoint_s: float,
                epochs_spent: float) -> PackRecord:
        """The pack's record: its members, settings and time by phase."""
        probed = self.context.settings.probe_seconds()
        probe_s, self._probed = probed - self._probed, probed
        return PackRecord.measured(
            pack_run, pack_id, bracket.s, rung, epochs, predicted_s=predicted_s,
            checkpoint_s=checkpoint_s, probe_s=probe_s, epochs_spent=epochs_spent,
            planned_cost_bytes=sum(self.context.capacity.cost(m.trial)
                                   for m in pack_run.members),
            search_started=self.clock.started, session=self.study.session)

    def restore(self, result: RungResult) -> None:
        """A result journaled before the resume, back in the study (nothing re-journaled). A
        diverged trial ends again, its files left alone: they went when it diverged, and a
        population's member may have trained on since from a donor's state."""
        self.study.restore(result)
        if result.failed and self.study.trials[result.trial_id].status == "running":
            self.emit(TrialEnded(result.trial_id, "failed"))

    def retire(self, trial_id: str, status: str) -> None:
        """Ends a trial as ``status`` (finished, killed, failed); its checkpoints go."""
        record = self.study.trials[trial_id]
        if record.status != "running":
            return
        self.emit(TrialEnded(trial_id, status))
        self.store.retire(trial_id, [r.checkpoint for r in record.rungs])
        self.states.pop(trial_id, None)

    def exploit(self, decision: Exploits, epochs: float, members: Sequence[Trial],
                after: Sequence[Trial], done: Container[str], journaled: bool = False) -> None:
        """A population's exploits at interval ``decision.rung``'s end (``epochs``): journaled
        (unless a resume read them back), then made. Each exploited member still to train
        (not in ``done``) starts the next rung from its donor's end state, written to its own
        copy first so that a resume starts it there too, with its step counter at the start
        of the next epoch for its new batch size. It trains on with the exploit's values and
        the donor's data order (its seed: ``after``), so with the donor's values it would
        train exactly as the donor."""
        self.emit(MembersExploited(decision.bracket, decision.rung, epochs,
                                   tuple(decision.exploits),
                                   {t.trial_id: dict(t.hparams) for t in after}, journaled))
        before = {t.trial_id: t for t in members}
        now = {t.trial_id: t for t in after}
        for e in (e for e in decision.exploits if e.member not in done):
            step = steps_for(epochs, now[e.member].batch_size,
                             self.context.settings.train_size)
            start = self.store.donor_start(
                e.member, decision.rung, e.donor,
                lambda d=e.donor: (self.states.get(d)
                                   or self.store.read(self.study.trials[d].last.checkpoint)),
                step, before[e.donor].optimizer != now[e.member].optimizer)
            self.starts[e.member] = (start, step)  # in memory: a Ray worker may not see path
