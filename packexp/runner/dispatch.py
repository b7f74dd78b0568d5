"""Packs sent to workers and committed as they come back: a synchronous rung's in plan order,
whichever worker finishes first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from packexp.events import Event, PackStarted
from packexp.executors import Executor, PackJob
from packexp.records.record import RungResult
from packexp.runner.ledger import Ledger
from packexp.runner.packs import Packer, Queued
from packexp.runner.settings import SearchClock
from packexp.runner.signals import raise_if_interrupted


@dataclass
class Dispatch:
    """Sends planned packs to ``executor`` and commits each one back through ``ledger``; the
    first one sent starts the search's ``clock``."""

    executor: Executor
    ledger: Ledger
    packer: Packer
    emit: Callable[[Event], None]
    clock: SearchClock
    _sent: dict[str, tuple[Queued, float | None]] = field(default_factory=dict)  # in flight
    _order: dict[str, list[str]] = field(default_factory=dict)  # ordered plan -> sent keys
    _back: dict[str, tuple[PackJob, list]] = field(default_factory=dict)  # back, not committed

    def send(self, queued: Queued) -> None:
        """Sends a planned pack to a free worker."""
        raise_if_interrupted()  # a Ctrl-C that a finalizer swallowed stops the search here
        self.emit(PackStarted(queued.index, queued.job.key, queued.job.group))
        self.clock.start(self.executor.clock)  # the first pack's: start-up is over
        self._sent[queued.job.key] = queued, self.packer.predict(queued.job, queued.context)
        if queued.ordered:
            self._order.setdefault(queued.plan, []).append(queued.job.key)
        self.executor.submit(queued.job)

    def collect(self) -> Iterator[RungResult]:
        """Waits for the next pack to come back; commits it part by part (a pack split out of
        memory has several), yielding each member's result after its part is committed, so
        the policy hears them before the next part is. A synchronous rung's packs are
        committed in plan order: one back early waits for those sent before it."""
        job, runs = self.executor.next_done()
        self._back[job.key] = job, runs
        queued, _ = self._sent[job.key]
        order = self._order.get(queued.plan)
        keys = [job.key]
        if order is not None:
            keys = []
            while order and order[0] in self._back:
                keys.append(order.pop(0))
        for key in keys:
            job, runs = self._back.pop(key)
            queued, predicted = self._sent.pop(key)
            for part, pack_run in enumerate(runs):
                yield from self.ledger.commit(queued.bracket, queued.rung, job.epochs,
                                              key + (f"-{part}" if len(runs) > 1 else ""),
                                              pack_run, predicted if len(runs) == 1 else None)
