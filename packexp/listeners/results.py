"""The results collector: every trial and pack of the search, kept from its events."""

from __future__ import annotations

from collections.abc import Sequence

from packexp.events import (
    Listener,
    MemberScored,
    PackFinished,
    PackRecord,
    RungResult,
    TrialEnded,
    TrialRecord,
)
from packexp.search_space import Trial


class ResultsCollector(Listener):
    """The search's trials (``TrialRecord``) and packs (``PackRecord``), as events tell them.

    The driver reads it too: a trial's last checkpoint and its status.
    """

    def __init__(self) -> None:
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

    def on_trial_ended(self, event: TrialEnded) -> None:
        self.trials[event.trial_id].status = event.status

    def best(self) -> dict | None:
        """The trial and rung with the highest validation accuracy seen."""
        scored = [(r.val_accuracy, r.epochs, t) for t in self.trials.values()
                  for r in t.rungs if r.val_accuracy is not None]
        if not scored:
            return None
        acc, epochs, trial = max(scored, key=lambda s: (s[0], s[1]))
        return {"trial_id": trial.trial_id, "hparams": trial.hparams,
                "val_accuracy": acc, "epochs": epochs}
