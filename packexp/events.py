"""What a search tells the world: typed events and their listeners.

The search (``packexp/runner/search.py``) emits one event per step of the search, in order, to a
list of listeners: the journal, the tracker, the progress display and the results
collector are listeners (``packexp/listeners/``), and so is any a user adds under
``listeners:`` in the config. A listener overrides the handlers it needs; the others do
nothing. The records the events carry are ``packexp/records/record.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from packexp.records.best import Best
from packexp.records.record import (
    Exploit,
    Exploited,
    PackRecord,
    PlanRecord,
    RungResult,
    Status,
    TrialRecord,
)
from packexp.space import Trial

if TYPE_CHECKING:
    from packexp.records.search_result import SearchResult

# The records the events carry, importable from here as before they had their own module.
__all__ = ["Best", "Event", "Exploit", "Exploited", "Listener", "Listeners", "MemberScored",
           "MembersExploited", "PackFinished", "PackRecord", "PackStarted", "PlanRecord",
           "RungPlanned", "RungResult", "SearchFinished", "Status", "Summary", "TrialEnded",
           "TrialRecord"]


# Events, in the order a search emits them.

@dataclass(frozen=True)
class Event:
    #: The ``Listener`` method that handles it.
    handler: ClassVar[str] = ""


@dataclass(frozen=True)
class RungPlanned(Event):
    """A rung's trials still to train, grouped into packs (``fusion``: each pack's setting,
    None for the run's). ``done``: its trials a resume skips; ``journaled``: the plan was
    read back from the journal, not made now.

    Asynchronous halving plans a rung many times: each plan has its own ``key`` (its packs
    are ``<key>-p<j>``) and names the configurations it drew (``sampled``), which a resume
    cannot draw again, since they were drawn from the results known then."""

    handler: ClassVar[str] = "on_rung_planned"
    bracket: int
    rung: int
    epochs: float
    packs: Sequence[Sequence[Trial]]
    fusion: Sequence[str | None]
    done: Sequence[str] = ()
    journaled: bool = False
    key: str | None = None
    sampled: Sequence[Trial] = ()

    @property
    def name(self) -> str:
        """The plan's name: its packs are ``<name>-p<j>``."""
        return self.key or f"b{self.bracket}-r{self.rung}"

    def plan_record(self) -> PlanRecord:
        """The plan as the journal keeps it."""
        return PlanRecord(self.bracket, self.rung, [[t.trial_id for t in g] for g in self.packs],
                          list(self.fusion), self.key, None if self.key is None else [
                              {"trial_id": t.trial_id, "hparams": dict(t.hparams),
                               "seed": t.seed} for t in self.sampled])


@dataclass(frozen=True)
class PackStarted(Event):
    """A planned pack is handed to where packs train (``index``: its place in the plan)."""

    handler: ClassVar[str] = "on_pack_started"
    index: int
    key: str
    members: Sequence[Trial]


@dataclass(frozen=True)
class MemberScored(Event):
    """A member of a finished pack, scored; its checkpoint is durable already.

    ``tags``: the run's names (strategy, model, dataset); ``promoted_from``: the pack the
    trial trained in at its rung before; ``memory_mb``: the member's memory as the strategy
    planned with it (estimated, scaled by a measured probe where one ran)."""

    handler: ClassVar[str] = "on_member_scored"
    result: RungResult
    trial: Trial
    pack: PackRecord
    tags: Mapping[str, str] = field(default_factory=dict)
    promoted_from: str | None = None
    memory_mb: float | None = None


@dataclass(frozen=True)
class PackFinished(Event):
    """A pack whose members are all scored; ``best``: the search's best value so far of its
    objective's ``metric``; ``epochs_spent``: the epochs every pack so far trained, summed
    (the search's budget used)."""

    handler: ClassVar[str] = "on_pack_finished"
    pack: PackRecord
    index: int
    best: float | None = None
    epochs_spent: float | None = None
    metric: str = "val_accuracy"


@dataclass(frozen=True)
class MembersExploited(Event):
    """A population's interval ``rung`` has ended at ``epochs``: ``exploits`` say which
    members copy which, and ``hparams`` are every member's values for the next interval.
    Journaled before any of it takes effect; ``journaled``: read back by a resume."""

    handler: ClassVar[str] = "on_members_exploited"
    bracket: int
    rung: int
    epochs: float
    exploits: Sequence[Exploit]
    hparams: Mapping[str, Mapping[str, Any]]
    journaled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The journal's ``exploit`` record."""
        return {"bracket": self.bracket, "rung": self.rung, "epochs": self.epochs,
                "exploits": [e.to_dict() for e in self.exploits]}


@dataclass(frozen=True)
class TrialEnded(Event):
    """A trial trains no further: ``killed`` (cut by halving), ``failed`` or ``finished``."""

    handler: ClassVar[str] = "on_trial_ended"
    trial_id: str
    status: Status


@dataclass(frozen=True)
class SearchFinished(Event):
    """The search is over and ``results.json`` written: its ``records.SearchResult``
    (``result.stopped``: why it stopped early, its budget; None when it ran to its end)."""

    handler: ClassVar[str] = "on_search_finished"
    result: SearchResult

    @property
    def wall_time_s(self) -> float:
        return self.result.wall_time_s

    @property
    def stopped(self) -> str | None:
        return self.result.stopped


@dataclass(frozen=True)
class Summary(Event):
    """Figures and files a task records on its run (a profile's table, a search's plots)."""

    handler: ClassVar[str] = "on_summary"
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    artifacts: Sequence[tuple[Path, str | None]] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class Listener:
    """Receives a search's events; each handler does nothing unless overridden."""

    def on_rung_planned(self, event: RungPlanned) -> None:
        pass

    def on_pack_started(self, event: PackStarted) -> None:
        pass

    def on_member_scored(self, event: MemberScored) -> None:
        pass

    def on_pack_finished(self, event: PackFinished) -> None:
        pass

    def on_members_exploited(self, event: MembersExploited) -> None:
        pass

    def on_trial_ended(self, event: TrialEnded) -> None:
        pass

    def on_search_finished(self, event: SearchFinished) -> None:
        pass

    def on_summary(self, event: Summary) -> None:
        pass


class Listeners:
    """Several listeners as one: each event goes to each, in the order given."""

    def __init__(self, listeners: Iterable[Listener] = ()) -> None:
        self.listeners = list(listeners)

    def emit(self, event: Event) -> None:
        for listener in self.listeners:
            getattr(listener, event.handler)(event)
