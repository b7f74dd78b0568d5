"""The run's append-only journal: what a killed search needs to resume without retraining."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.events import Exploit, PackRecord, PlanRecord, RungResult
from packexp.files import naming

log = logging.getLogger(__name__)

NAME = "journal.jsonl"


class JournalError(ValueError):
    """A journal that cannot be resumed from; the message says why."""


class Journal:
    """JSON records, one per line, each appended with one ``write`` and an ``fsync``.

    A crash can therefore only tear the final line, which ``read`` ignores (and logs).

    Args:
        run_dir: The run directory that holds ``journal.jsonl``.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / NAME

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def append(self, event: str, **record: Any) -> None:
        """Appends one record. A torn final line (a killed append) is cut off first, so the
        new record starts a line of its own."""
        data = (json.dumps({"event": event, **record}, sort_keys=True) + "\n").encode()
        with naming(self.path):
            self._append(data)

    def _append(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                tail = os.pread(fd, size, 0)
                os.ftruncate(fd, tail.rfind(b"\n") + 1)
                log.warning("%s: cut off a half-written final line", self.path)
            while data:  # a short write would otherwise tear the line
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """Every complete record; a torn final line is dropped with a warning."""
        if not self.exists:
            raise JournalError(f"{self.path}: no journal here; nothing to resume")
        lines = self.path.read_bytes().split(b"\n")
        records = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                records.append(json.loads(raw))
            except ValueError:
                if number >= len(lines) - 1:  # the last line, written when the run was killed
                    log.warning("%s: ignoring a half-written final line", self.path)
                    continue
                raise JournalError(f"{self.path}:{number}: not a JSON record") from None
        if not records or records[0].get("event") != "start":
            raise JournalError(f"{self.path}: does not begin with a start record")
        return records

    def events(self, event: str) -> Iterator[dict[str, Any]]:
        return (r for r in self.read() if r["event"] == event)


def first_difference(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> str | None:
    """The first key whose value differs between two flat configs, as ``key: a != b``."""
    for key in sorted(set(expected) | set(actual), key=lambda k: (k.count("."), k)):
        if expected.get(key, "<unset>") != actual.get(key, "<unset>"):
            return (f"{key}={actual.get(key, '<unset>')!r} here, but the journal has "
                    f"{key}={expected.get(key, '<unset>')!r}")
    return None


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
    """A killed run's finished work as a resume reads it from the journal, typed.

    Attributes:
        done: Per (bracket, rung), each trial's journaled result, in journal order. Results
            of a pack without its ``pack`` record (the run was killed while the pack was
            committed) are left out: the whole pack trains again, as an unbroken run trained
            it.
        packs: The packs journaled whole.
        plans: Per (bracket, rung), a synchronous scheduler's first plan of the rung.
        keyed: An asynchronous scheduler's plans, each named by its key, in journal order.
        exploits: A population's exploits (``scheduler=pbt``), by the interval they end.
    """

    done: dict[tuple[int, int], dict[str, RungResult]] = field(default_factory=dict)
    packs: list[PackRecord] = field(default_factory=list)
    plans: dict[tuple[int, int], PlanRecord] = field(default_factory=dict)
    keyed: list[PlanRecord] = field(default_factory=list)
    exploits: dict[int, list[Exploit]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[dict]) -> Replayed:
        replayed = cls()
        for r in finished(records):
            if r["event"] == "result":
                result = RungResult.from_dict(r)
                replayed.done.setdefault((result.bracket, result.rung), {})[
                    result.trial_id] = result
            elif r["event"] == "pack":
                replayed.packs.append(PackRecord.from_dict(r["pack"]))
            elif r["event"] == "exploit":
                replayed.exploits[r["rung"]] = [Exploit.from_dict(e) for e in r["exploits"]]
            elif r["event"] == "plan":
                plan = PlanRecord.from_dict(r)
                if plan.key is not None:
                    replayed.keyed.append(plan)
                else:
                    replayed.plans.setdefault((plan.bracket, plan.rung), plan)
        return replayed

    @property
    def members(self) -> int:
        """The member results found."""
        return sum(len(v) for v in self.done.values())

    def left(self, plan: PlanRecord,
             todo: Iterable[str]) -> list[tuple[int, list[str], str | None]]:
        """``plan``'s packs that still have members in ``todo``, each with its number in the
        plan (so its ``pack_id`` is the one an unbroken run gives it) and only those members."""
        todo = set(todo)
        groups = [(j, [i for i in pack if i in todo], f)
                  for j, (pack, f) in enumerate(zip(plan.packs, plan.fusion, strict=True))]
        return [(j, g, f) for j, g, f in groups if g]
