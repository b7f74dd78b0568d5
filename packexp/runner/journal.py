"""The run's append-only journal: what a killed search needs to resume without retraining."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from packexp.files import naming
from packexp.moved import MOVED

log = logging.getLogger(__name__)

NAME = "journal.jsonl"


class JournalError(ValueError):
    """A journal that cannot be resumed from; the message says why."""


class Journal:
    """JSON records, one per line, each appended with one ``write``; those that make earlier
    ones count (a pack's record after its members' results, the search's start and end) with
    an ``fsync`` too, which makes every line before them durable with them.

    A killed process can therefore only tear the final line, which ``read`` ignores (and
    logs); a machine that loses power loses at most the records after the last ``fsync``,
    which a resume trains again (a pack's results without its record count for nothing).

    Args:
        run_dir: The run directory that holds ``journal.jsonl``.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / NAME

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def append(self, event: str, *, durable: bool = True, **record: Any) -> None:
        """Appends one record; ``durable``: fsynced with every line before it (a record that
        another makes count, a result before its pack's record, need not be). A torn final
        line (a killed append) is cut off first, so the new record starts a line of its own."""
        data = (json.dumps({"event": event, **record}, sort_keys=True) + "\n").encode()
        with naming(self.path):
            self._append(data, durable)

    def _append(self, data: bytes, durable: bool = True) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                tail = os.pread(fd, size, 0)
                os.ftruncate(fd, tail.rfind(b"\n") + 1)
                log.warning("%s: cut off a half-written final line", self.path)
            while data:  # a short write would otherwise tear the line
                data = data[os.write(fd, data):]
            if durable:
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


#: Keys a release added to the config, with the value every run had before them: a journal
#: written by an earlier release lacks them, and resumes as if it had these values.
ADDED_KEYS: Mapping[str, Any] = {"surrogate.scale": 1, "surrogate.transfer": 3,
                                 "surrogate.readout_zero_init": False,
                                 "dataset.sequences": False}


def as_journaled(config: Mapping[str, Any]) -> dict[str, Any]:
    """A flat config with the keys added since an earlier release at their old values where
    it lacks them, and each ``_target_`` an earlier release named (``packexp.moved``) at its
    new path with the keywords that path takes: the two sides a resume compares (a test's
    search journals no config)."""
    flat = {**ADDED_KEYS, **config}
    for key, value in config.items():
        if key.rsplit(".", 1)[-1] == "_target_" and value in MOVED:
            new, keywords = MOVED[value]
            node = key.rsplit(".", 1)[0]
            flat[key] = new
            for name, given in keywords.items():
                flat.setdefault(f"{node}.{name}", given)
    return flat
