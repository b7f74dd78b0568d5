"""The results collector: every trial and pack of the search, kept from its events."""

from __future__ import annotations

from collections.abc import Sequence

from packexp.events import (
    Best,
    Listener,
    MemberScored,
    MembersExploited,
    PackFinished,
    PackRecord,
    RungResult,
    TrialEnded,
    TrialRecord,
)
from packexp.objectives import ACCURACY, Objective, fronts
from packexp.schedulers.base import schedule
from packexp.space import Trial


class ResultsCollector(Listener):
    """The search's trials (``TrialRecord``) and packs (``PackRecord``), as events tell them.

    The runner reads it too: a trial's last checkpoint and its status, and the best by
    ``objective`` (what the search tunes for; ``objectives``).
    """

    def __init__(self, objective: Objective = ACCURACY) -> None:
        self.objective = objective
        self.trials: dict[str, TrialRecord] = {}
        self.packs: list[PackRecord] = []

    def add_trials(self, bracket: int, trials: Sequence[Trial]) -> None:
        for t in trials:
            self.trials[t.trial_id] = TrialRecord(t.trial_id, dict(t.hparams), bracket)

    def record(self, result: RungResult) -> None:
        self.trials[result.trial_id].rungs.append(result)

    def on_member_scored(self, event: MemberScored) -> None:
        self.record(event.result)

    def on_pack_finished(self, event: PackFinished) -> None:
        self.packs.append(event.pack)

    def on_members_exploited(self, event: MembersExploited) -> None:
        for e in event.exploits:
            trial = self.trials[e.member]
            trial.lineage.append({"epoch": event.epochs, **e.to_dict()})
            del trial.lineage[-1]["member"]
            if trial.status == "failed":  # it trains on from its donor's state
                trial.status = "running"

    def on_trial_ended(self, event: TrialEnded) -> None:
        self.trials[event.trial_id].status = event.status

    def front(self) -> list[dict] | None:
        """Under several objectives, the Pareto front of the trials at their last scored
        rungs (each trial once): ``trial_id``, ``hparams``, ``epochs`` and each goal's value,
        in the order the trials were drawn; None under one objective."""
        objective = self.objective
        if not objective.several:
            return None
        last = [(t, scored[-1]) for t in self.trials.values()
                if (scored := [r for r in t.rungs if objective.scores(r) is not None])]
        if not last:
            return []
        front = fronts([objective.scores(r) for _, r in last])[0]
        return [{"trial_id": t.trial_id, "hparams": t.hparams_at(r.epochs),
                 "epochs": int(r.epochs) if float(r.epochs).is_integer() else r.epochs,
                 **{name: getattr(r, name) for name, _ in objective.goals}}
                for t, r in (last[i] for i in front)]

    def best(self) -> Best | None:
        """The trial and rung best by the objective (of two as good, the later epoch), and
        the values it trained with; in a population, also the schedule that made its
        weights."""
        objective = self.objective
        scored = [(objective.score(r), r.epochs, t, r) for t in self.trials.values()
                  for r in t.rungs if objective.score(r) is not None]
        if not scored:
            return None
        _, epochs, trial, result = max(scored, key=lambda s: (s[0], s[1]))
        lineage = None
        if any(t.lineage for t in self.trials.values()):
            lineage = schedule(trial.trial_id, epochs,
                               {t.trial_id: t.lineage for t in self.trials.values()},
                               {t.trial_id: t.hparams for t in self.trials.values()})
        return Best(trial.trial_id, trial.hparams_at(epochs), result.val_accuracy,
                    int(epochs) if float(epochs).is_integer() else epochs, lineage,
                    objective.metric, objective.value(result))
