"""A run's journal read back (``journal.py``), by the study's side: what a resume replays
(``Replayed``), and what a command asks of a run directory (``Recorded``: a journal there,
finished, its tracking run, its config, a resume's checks). Pure Python.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError
from packexp.records.record import Exploit, PackRecord, PlanRecord, RungResult
from packexp.runner.journal import Journal, JournalError, as_journaled, first_difference
from packexp.schedulers.base import Exploits


@dataclass(frozen=True)
class Recorded:
    """A run directory's journal as the commands ask of it, read once (``read``).

    Attributes:
        run_dir: The run directory.
        exists: Whether it holds a journal.
        lines: Its lines, each a journaled event's record (none when there is no journal,
            or it cannot be read: ``error`` says why).
        error: Why the journal cannot be read (a ``JournalError``'s message), or None.
    """

    run_dir: Path
    exists: bool
    lines: tuple[dict[str, Any], ...] = ()
    error: str | None = None

    @staticmethod
    def there(run_dir: str | Path) -> bool:
        """Whether ``run_dir`` holds a journal (without reading it)."""
        return Journal(run_dir).exists

    @classmethod
    def read(cls, run_dir: str | Path) -> Recorded:
        journal = Journal(run_dir)
        if not journal.exists:
            return cls(Path(run_dir), False)
        try:
            return cls(Path(run_dir), True, tuple(journal.read()))
        except (JournalError, OSError) as e:
            return cls(Path(run_dir), True, error=str(e))

    def _any(self, *events: str) -> bool:
        return any(r["event"] in events for r in self.lines)

    @property
    def started(self) -> bool:
        """Whether a search began here: a journal with its ``start`` record."""
        return bool(self.lines)

    @property
    def finished(self) -> bool:
        """Whether its search journaled its end (``finished``)."""
        return self._any("finished")

    @property
    def unfinished(self) -> bool:
        """A search begun here and not finished: a killed or stopped one, to resume."""
        return self.started and not self.finished

    @property
    def tracking_run_id(self) -> str | None:
        """The MLflow run the search journaled; None when it was not tracked."""
        return next((r["run_id"] for r in self.lines if r["event"] == "tracking"), None)

    @property
    def resumed_since_its_end(self) -> bool:
        """Whether its last session is a resume that has not finished or stopped: its
        ``results.json`` is then an earlier session's."""
        resumes = [i for i, r in enumerate(self.lines) if r["event"] == "resume"]
        return bool(resumes) and not any(r["event"] in ("finished", "stopped")
                                         for r in self.lines[resumes[-1]:])

    def to_continue(self, config: Mapping[str, Any], resume: bool,
                    unsettled: Collection[str] = ()) -> list[dict[str, Any]]:
        """The records a run of the flat ``config`` continues here ([] for a fresh run), or a
        ``ConfigError`` naming why it cannot start here: a fresh run where a journal is, a
        resume where none is (or one that cannot be read), of a finished run, or of one
        started with another value of a key (but ``unsettled`` keys, whose value the job
        settles later)."""
        if not resume:
            if self.exists:
                raise ConfigError(f"hydra.run.dir={self.run_dir}: holds a journal already; "
                                  "add resume=true to continue that run, or choose another "
                                  "directory")
            return []
        if not self.lines:
            raise ConfigError("resume=true: " + (self.error or f"{Journal(self.run_dir).path}: "
                                                 "no journal here; nothing to resume"))
        if self.finished:
            raise ConfigError(f"resume=true: the run in {self.run_dir} has finished already")
        start = self.lines[0]
        differs = first_difference({k: v for k, v in as_journaled(start["config"]).items()
                                    if k not in unsettled},
                                   {k: v for k, v in as_journaled(config).items()
                                    if k not in unsettled})
        if differs:
            started = " ".join(start.get("overrides") or []) or "no overrides"
            raise ConfigError(f"resume=true: {differs}; resume with the overrides the run "
                              f"started with ({started})")
        return list(self.lines)


# Resume: a killed run's finished work read back from its journal, typed, and what is left of
# its plans. A resumed search tells these facts to its policy in the order they happened
# (``PackedSearch.run``): results and packs journaled whole are not trained again, and a plan
# journaled before the kill is trained as it was planned, each pack under the number an
# unbroken run gives it.


def earlier_s(records: Sequence[dict]) -> float:
    """Search time spent by the sessions a resume continues (to each one's last pack)."""
    total, session = 0.0, 0.0
    for r in records:
        if r["event"] == "resume":
            total, session = total + session, 0.0
        elif r["event"] == "pack":
            session = max(session, r.get("elapsed_s", 0.0))
    return total + session


def finished(records: list[dict]) -> list[dict]:
    """The journal's records less the results of packs whose ``pack`` record is missing."""
    packs = {r["pack"]["pack_id"] for r in records if r["event"] == "pack"}
    return [r for r in records if r["event"] != "result" or r["pack_id"] in packs]


def journaled_checkpoints(records: list[dict]) -> set[str]:
    """The checkpoints a resumed search may continue from: each trial's last one whose pack
    was journaled whole."""
    last = {r["trial_id"]: r["checkpoint"] for r in finished(records)
            if r["event"] == "result"}
    return {path for path in last.values() if path}


@dataclass
class Replayed:
    """A killed run's journal as a resume reads it, typed: the facts a policy is told again
    (``PackedSearch.run``), and what is left of its plans.

    Attributes:
        facts: The plans, results and exploits, in the order they happened. Results of a pack
            without its ``pack`` record (the run was killed while the pack was committed) are
            left out: the whole pack trains again, as an unbroken run trained it.
        done: Per (bracket, rung), each trial's journaled result among ``facts``.
        packs: The packs journaled whole.
        plans: Each plan by its name (``<key>``, or ``b<s>-r<rung>`` for a synchronous rung),
            the first journaled under it, in journal order.
    """

    facts: list[PlanRecord | RungResult | Exploits] = field(default_factory=list)
    done: dict[tuple[int, int], dict[str, RungResult]] = field(default_factory=dict)
    packs: list[PackRecord] = field(default_factory=list)
    plans: dict[str, PlanRecord] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[dict]) -> Replayed:
        replayed = cls()
        for r in finished(records):
            if r["event"] == "result":
                result = RungResult.from_dict(r)
                replayed.done.setdefault((result.bracket, result.rung), {})[
                    result.trial_id] = result
                replayed.facts.append(result)
            elif r["event"] == "pack":
                replayed.packs.append(PackRecord.from_dict(r["pack"]))
            elif r["event"] == "exploit":
                replayed.facts.append(Exploits(r["bracket"], r["rung"], tuple(
                    Exploit.from_dict(e) for e in r["exploits"])))
            elif r["event"] == "plan":
                plan = PlanRecord.from_dict(r)
                name = plan.key or f"b{plan.bracket}-r{plan.rung}"
                if name not in replayed.plans:  # a rung planned again: the first plan counts
                    replayed.plans[name] = plan
                    replayed.facts.append(plan)
        return replayed

    @property
    def members(self) -> int:
        """The member results found."""
        return sum(len(v) for v in self.done.values())

    def unfinished(self) -> list[tuple[PlanRecord, list[tuple[int, list[str], str | None]],
                                       list[str]]]:
        """The journaled plans that still have packs to train, in journal order: each with
        those packs, numbered as in its plan (so each ``pack_id`` is the one an unbroken run
        gives it) and holding only the members still to train, and the plan's members done
        before the kill, sorted.

        A pack's results are journaled together, so its members are all done or all to do;
        rebuilding the same packs gives a resumed run exactly the numbers of an unbroken one,
        fused packs included.
        """
        out = []
        for plan in self.plans.values():
            done = self.done.get((plan.bracket, plan.rung), {})
            left = [(j, [i for i in pack if i not in done], f)
                    for j, (pack, f) in enumerate(zip(plan.packs, plan.fusion, strict=True))]
            left = [(j, g, f) for j, g, f in left if g]
            if left:
                out.append((plan, left, sorted(i for pack in plan.packs for i in pack
                                               if i in done)))
        return out
