"""The checkpoint store: the end states a search's trials continue from, as files, read and
written by the search's trainer (``executors.Trainer``: TensorFlow's ``.npz`` files by
default).

Each trial keeps the end state of the rung it last finished, ``<root>/<trial>/r<rung>``,
written whole (``write_state`` renames a complete file into place) before any journal record
names it. A population's replaced member keeps its copy of its donor's state apart, under
``<root>/exploits/``, since retiring the member (a diverged one) deletes its own files.
``Ledger.commit`` states when each file is written and deleted.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CheckpointStore:
    """A search's checkpoint files under ``root`` (the run directory's ``checkpoints/``),
    kept by ``trainer``."""

    root: Path
    trainer: Any  # executors.Trainer

    def read(self, path: str | Path) -> Any:
        """The state in the file ``path``."""
        return self.trainer.read_state(path)

    def write(self, state: Any, trial_id: str, rung: int) -> str:
        """Writes ``trial_id``'s end state of ``rung``; returns the file's path."""
        return self.trainer.write_state(state, self.root / trial_id / f"r{rung}")

    def exploit_copy(self, member: str, rung: int, donor: str) -> Path:
        """Where ``member``'s copy of ``donor``'s end state of interval ``rung`` is kept
        (``donor`` may be ``*``, a pattern), less the suffix the state's writer adds."""
        return self.root / "exploits" / f"{member}-r{rung}-from-{donor}"

    def donor_start(self, member: str, rung: int, donor: str, donor_state: Callable[[], Any],
                    step: int, fresh_slots: bool) -> Any:
        """An exploited member's starting state (a ``MemberState``): the copy a session
        before a resume wrote, else ``donor_state()`` with the step counter at ``step``,
        written to the copy's place first so that a resume starts the member there too."""
        path = self.exploit_copy(member, rung, donor)
        for written in path.parent.glob(f"{path.name}.*"):  # whole: renamed into place
            return self.read(written)
        state = donor_state()
        start = self.trainer.member_state(state.weights, state.slots, step,
                                          fresh_slots=fresh_slots)
        self.trainer.write_state(start, path)
        return start

    def superseded(self, trial_id: str, rung: int, before: str | None,
                   now: str | None) -> list[Path]:
        """The files a trial no longer needs once its result of ``rung`` is journaled with
        checkpoint ``now``: its state of the rung before, its copies of donors' states, and
        ``before`` (the checkpoint its last result named) when that is another file."""
        copies = self.exploit_copy(trial_id, rung - 1, "*")
        # The file's name is known: a glob per member would compile a pattern for each.
        state = self.root / trial_id / f"r{rung - 1}{self.trainer.checkpoint_suffix}"
        stale = [state] if state.exists() else []
        if copies.parent.is_dir():  # a population's: copies of donors' states
            stale += copies.parent.glob(f"{copies.name}.*")
        if before not in (None, now):
            stale.append(Path(before))
        return stale

    @property
    def kept_root(self) -> Path:
        """Where the states a search may hand over as models wait (``runner.keep``)."""
        return self.root / "kept"

    def kept(self, trial_id: str, rung: int) -> Path:
        """The kept state of ``trial_id``'s result of ``rung`` (with its suffix)."""
        return self.kept_root / f"{trial_id}.r{rung}{self.trainer.checkpoint_suffix}"

    def keep(self, state: Any, trial_id: str, rung: int) -> str:
        """Writes the state of ``trial_id``'s result of ``rung`` for ``runner.keep``."""
        return self.trainer.write_state(state, self.kept(trial_id, rung))

    def drop_kept(self, wanted: set[tuple[str, int]], among: set[str] | None = None) -> None:
        """Deletes the kept states not ``wanted`` (of the trials ``among``; None: all)."""
        suffix = self.trainer.checkpoint_suffix
        for path in self.kept_root.glob(f"*.r*{suffix}"):
            trial_id, _, rung = path.name[: -len(suffix)].rpartition(".r")
            if (among is None or trial_id in among) and (trial_id, int(rung)) not in wanted:
                path.unlink(missing_ok=True)

    @staticmethod
    def delete(paths: Iterable[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)

    def retire(self, trial_id: str, checkpoints: Iterable[str | None]) -> None:
        """Deletes a retired trial's files: its folder and every checkpoint its results
        named (a worker's may lie elsewhere). A retired trial never continues."""
        shutil.rmtree(self.root / trial_id, ignore_errors=True)
        self.delete(Path(c) for c in checkpoints if c)
