"""The study: a search's record, owned in one place. Pure Python.

It holds the journal (``journal.py``: what a killed search needs to resume), the typed trials
and packs (``TrialRecord``, ``PackRecord``), the journal a resume read back (``Replayed``) and
the session facts that come with it, and makes the outcome (``result``: a ``SearchResult``,
whose ``to_json`` is ``results.json``).

The study is not a listener. The runner writes each event to it (``write``: journaled first,
then kept), and only then tells the listeners; the runner reads the trials, the best and the
front back from it. Optuna's ``Study`` with its storage and frozen trials is the model.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from packexp.events import (
    Event,
    MemberScored,
    MembersExploited,
    PackFinished,
    RungPlanned,
    TrialEnded,
)
from packexp.objectives import ACCURACY, Objective, fronts
from packexp.records.best import Best, FrontPoint
from packexp.records.record import Exploited, PackRecord, RungResult, TrialRecord, whole
from packexp.records.results import totals
from packexp.records.search_result import SearchFacts, SearchResult
from packexp.runner.journal import Journal
from packexp.runner.leaders import Leaders
from packexp.runner.replay import Recorded, Replayed, earlier_s, journaled_checkpoints
from packexp.samplers import Observation
from packexp.schedulers.base import schedule
from packexp.space import Trial


class Study:
    """A search's journal, trials and packs, resume and result.

    Args:
        journal: Where the search is journaled (its run directory's ``journal.jsonl``); None
            keeps the study in memory only (a policy's simulation, a test of the record).
        objective: What the search tunes for: it ranks the best and the front.
        journaled: The journal's lines of the run a resume continues; empty for a fresh run.
    """

    def __init__(self, journal: Journal | None = None, objective: Objective = ACCURACY,
                 journaled: Sequence[dict] = ()) -> None:
        self.journal = journal
        self.objective = objective
        self.journaled = list(journaled)
        self.trials: dict[str, TrialRecord] = {}
        self.packs: list[PackRecord] = []
        self.leaders = Leaders(objective)  # the best and the top k, kept as results arrive
        self.replayed = Replayed.of(self.journaled) if self.journaled else Replayed()
        self.packs.extend(self.replayed.packs)
        self.epochs_spent = sum(p.epochs_spent for p in self.packs)  # by every pack so far
        self.earlier_s = earlier_s(self.journaled)
        self._observed: list[Observation] = []  # every scored rung, in ``observed``'s order
        self._observed_at: list[tuple[int, int]] = []  # each one's (draw order, arrival)
        self._lineage = False  # whether any trial continued from another's state
        self._tracking_run_id: str | None = None

    @classmethod
    def open(cls, run_dir: str | Path, objective: Objective = ACCURACY, *,
             config: Mapping[str, Any] | None = None, overrides: Sequence[str] = (),
             resume: bool = False, unsettled: Collection[str] = ()) -> Study:
        """The study of a search in ``run_dir``, checked against what is there first
        (``Recorded.to_continue``: a fresh run refuses a journal, a resume needs one of an
        unfinished run started with the same flat ``config``, but its ``unsettled`` keys; a
        ``ConfigError`` says why not). A fresh one journals its ``start`` (with ``config``
        and the command's ``overrides``); a resume replays the journal and journals its
        ``resume``. ``config`` None: a test's or a simulation's search, whose journal is
        continued as it is."""
        recorded = Recorded.read(run_dir)
        journaled = recorded.to_continue(
            recorded.lines[0]["config"] if config is None and recorded.lines
            else config or {}, resume, unsettled)
        journal = Journal(run_dir)
        if journaled:
            journal.append("resume", overrides=list(overrides))
        else:
            journal.append("start", config=dict(config or {}), overrides=list(overrides))
        return cls(journal, objective, journaled)

    @property
    def tracking_run_id(self) -> str | None:
        """The MLflow run this search logs to: the one journaled (``track``), or on a resume
        the one its first session started."""
        return next((r["run_id"] for r in self.journaled if r["event"] == "tracking"),
                    self._tracking_run_id)

    def track(self, run_id: str) -> None:
        """Journals the tracking run a fresh search opened, so a resume re-attaches to it."""
        if self.journal is not None and not self.resumed:
            self._journal("tracking", run_id=run_id)
        self._tracking_run_id = run_id

    @property
    def run_dir(self) -> Path:
        return self.journal.path.parent

    @property
    def resumed(self) -> bool:
        return bool(self.journaled)

    @functools.cached_property
    def session(self) -> int:
        """How many sessions this one continues: 0 for a fresh run (``started_s`` and
        ``elapsed_s`` restart each session). Counted once: each pack's record asks."""
        return (1 + sum(r["event"] == "resume" for r in self.journaled)) if self.journaled else 0

    def checkpoints(self) -> set[str]:
        """The checkpoints a resume may continue from (``journaled_checkpoints``)."""
        return journaled_checkpoints(self.journaled)

    # What the runner writes: each event journaled (one fsynced line) before it is kept.

    def add_trials(self, bracket: int, trials: Sequence[Trial]) -> None:
        """Configurations drawn for ``bracket``: trials that run, not yet scored."""
        for t in trials:
            self.trials[t.trial_id] = TrialRecord(t.trial_id, dict(t.hparams), bracket)
            self.leaders.drawn(t.trial_id)

    def write(self, event: Event) -> None:
        """Journals what a resume needs of ``event``, then keeps it."""
        if isinstance(event, RungPlanned):
            if not event.journaled:  # a plan read back from the journal is there already
                self._journal("plan", durable=False, **event.plan_record().to_dict())
        elif isinstance(event, MemberScored):  # durable with its pack's record
            self._journal("result", durable=False, **event.result.to_dict())
            self.restore(event.result)
        elif isinstance(event, PackFinished):
            self._journal("pack", pack=event.pack.to_dict(), elapsed_s=event.pack.elapsed_s)
            self.packs.append(event.pack)
            self.epochs_spent += event.pack.epochs_spent
        elif isinstance(event, MembersExploited):
            if not event.journaled:
                self._journal("exploit", **event.to_dict())
            self._continued(event)
        elif isinstance(event, TrialEnded):
            self.trials[event.trial_id] = self.trials[event.trial_id].ended(event.status)

    def _journal(self, event: str, *, durable: bool = True, **record: Any) -> None:
        if self.journal is not None:
            self.journal.append(event, durable=durable, **record)

    def restore(self, result: RungResult) -> None:
        """A result, kept (one journaled before a resume: not journaled again)."""
        self.trials[result.trial_id] = self.trials[result.trial_id].scored(result)
        self.leaders.add(result)
        score = self.objective.score(result)
        if score is not None:  # in the order ``observed`` gives: trials as drawn, then rungs
            at = (self.leaders.order(result.trial_id), len(self._observed))
            i = bisect.bisect(self._observed_at, at)
            self._observed_at.insert(i, at)
            self._observed.insert(i, Observation(dict(self.trials[result.trial_id].hparams),
                                                 result.epochs, score))

    def observed(self) -> Sequence[Observation]:
        """Every scored rung so far, by the objective: what a sampler learns from, trials in
        the order drawn, each one's rungs in order (``draws.observed``'s order). Kept as
        results arrive, and not a copy: a sampler reads it and must not change it."""
        return self._observed

    def _continued(self, event: MembersExploited) -> None:
        self._lineage = self._lineage or bool(event.exploits)
        for e in event.exploits:
            self.trials[e.member] = self.trials[e.member].exploited(
                Exploited.of(event.epochs, e))

    def finish(self, wall_time_s: float, stopped: str | None = None) -> None:
        """Journals the search's end: ``finished``, or ``stopped`` early (by its budget),
        which a resume goes on from."""
        if stopped is not None:
            self._journal("stopped", reason=stopped, wall_time_s=wall_time_s)
        else:
            self._journal("finished", wall_time_s=wall_time_s)

    # What the runner and the task read back.

    def best(self) -> Best | None:
        """The trial and rung best by the objective (of two as good, the later epoch), the
        values it trained with and every metric the rung recorded; where trials continued
        from others' states, also the schedule of values that made its weights."""
        objective = self.objective
        result = self.leaders.best()
        if result is None:
            return None
        trial, epochs = self.trials[result.trial_id], result.epochs
        lineage = None
        if self._lineage:
            lineage = schedule(trial.trial_id, epochs,
                               {t.trial_id: t.lineage for t in self.trials.values()},
                               {t.trial_id: t.hparams for t in self.trials.values()})
        return Best(trial.trial_id, trial.hparams_at(epochs), result.val_accuracy,
                    whole(epochs), lineage, objective.metric, objective.value(result),
                    metrics=result.recorded())

    def front(self) -> list[FrontPoint] | None:
        """Under several objectives, the Pareto front of the trials at their last scored
        rungs (each trial once): ``trial_id``, ``hparams``, ``epochs`` and each goal's value,
        in the order the trials were drawn; None under one objective."""
        objective = self.objective
        if not objective.several:
            return None
        admits = self.leaders.admits
        last = [(t, scored[-1]) for t in self.trials.values() if admits(t.trial_id)
                and (scored := [r for r in t.rungs if objective.scores(r) is not None])]
        if not last:
            return []
        front = fronts([objective.scores(r) for _, r in last])[0]
        return [FrontPoint(t.trial_id, t.hparams_at(r.epochs), whole(r.epochs),
                           {name: getattr(r, name) for name, _ in objective.goals})
                for t, r in (last[i] for i in front)]

    def result(self, *, wall_time_s: float, models: Mapping[str, Mapping[str, Any]] = (),
               mlflow_run_id: str | None = None, **facts: Any) -> SearchResult:
        """The outcome: every trial and pack, the best, under several objectives the front,
        the kept ``models`` (named on ``best`` and on each front point whose weights they
        hold), and the task's ``facts`` (``SearchFacts``: names, seed, schedule, timings)."""
        kept = {k: dict(v) for k, v in dict(models).items()}

        def model(trial_id: str, epochs: float) -> str | None:
            entry = kept.get(trial_id)
            return entry["file"] if entry is not None and entry["epochs"] == epochs else None

        best, front = self.best(), self.front()
        if best is not None:
            best = replace(best, model=model(best.trial_id, best.epochs))
        if front is not None:
            front = tuple(replace(e, model=model(e.trial_id, e.epochs)) for e in front)
        trials, packs = tuple(self.trials.values()), tuple(self.packs)
        return SearchResult(
            self.run_dir, trials, packs, best, self.objective, round(wall_time_s, 3),
            SearchFacts.of({"resumed": self.resumed, **facts}),
            totals(trials, packs, wall_time_s=wall_time_s, objective=self.objective),
            front, kept, mlflow_run_id)


def load(run_dir: str | Path) -> SearchResult:
    """The ``SearchResult`` of the finished search in ``run_dir``.

    Raises:
        FileNotFoundError: ``run_dir`` holds no finished search (the message says why).
        ValueError: Its ``results.json`` is not a search's.
    """
    import json

    run_dir = Path(run_dir)
    path = run_dir / "results.json"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such directory")
    if not path.is_file():
        if not Recorded.there(run_dir):
            raise FileNotFoundError(f"{run_dir}: holds no search (no journal.jsonl, no "
                                    "results.json)")
        raise FileNotFoundError(f"{run_dir}: holds no results.json yet; its search is "
                                "running, was interrupted or failed (journal.jsonl): once it "
                                "has stopped, resume it with resume=true and this run_dir")
    results = json.loads(path.read_text())
    if "trials" not in results:
        raise ValueError(f"{path}: is not a search's results (a profile's or a plan's?)")
    return SearchResult.from_json(run_dir.resolve(), results,
                                  Recorded.read(run_dir).tracking_run_id)
