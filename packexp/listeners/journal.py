"""The journal as a listener: each event a resume needs, appended as it happens."""

from __future__ import annotations

from packexp.events import (
    Listener,
    MemberScored,
    MembersExploited,
    PackFinished,
    PlanRecord,
    RungPlanned,
    SearchFinished,
)
from packexp.records.journal import Journal


class JournalListener(Listener):
    """Appends ``plan``, ``result``, ``pack``, ``exploit`` and ``finished`` records to
    ``journal``.

    It must be the first listener: the order in which the driver commits a pack
    (``runner.ledger.Ledger.commit``) is what makes a killed search resumable.
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def on_rung_planned(self, event: RungPlanned) -> None:
        if event.journaled:  # a plan read back from the journal is there already
            return
        self.journal.append("plan", **PlanRecord.of(event).to_dict())

    def on_member_scored(self, event: MemberScored) -> None:
        self.journal.append("result", **event.result.to_dict())

    def on_pack_finished(self, event: PackFinished) -> None:
        self.journal.append("pack", pack=event.pack.to_dict(), elapsed_s=event.pack.elapsed_s)

    def on_members_exploited(self, event: MembersExploited) -> None:
        if not event.journaled:
            self.journal.append("exploit", **event.to_dict())

    def on_search_finished(self, event: SearchFinished) -> None:
        if event.stopped is not None:  # not finished: resume=true goes on from here
            self.journal.append("stopped", reason=event.stopped, wall_time_s=event.wall_time_s)
        else:
            self.journal.append("finished", wall_time_s=event.wall_time_s)
