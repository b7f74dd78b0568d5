"""A live progress display of the search; silent when output is not a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class SearchProgress:
    """Shows bracket, rung, pack, members, epochs and elapsed time while packs train.

    Args:
        scheduler: The Hyperband planner, for the bracket count.
        console: Where to draw; the display is off unless it is a terminal.
    """

    def __init__(self, scheduler: Any, console: Console | None = None) -> None:
        self.console = console or Console()
        self.brackets = scheduler.s_max + 1
        self._progress: Progress | None = None
        self._task = None
        self._rung = ""

    @property
    def enabled(self) -> bool:
        return self.console.is_terminal

    def __enter__(self) -> SearchProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("packs"), TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def rung(self, bracket: int, rung: int, packs: int, epochs: float) -> None:
        if self._progress is None:
            return
        self._rung = (f"bracket {self.brackets - bracket}/{self.brackets} (s={bracket}) "
                      f"rung {rung} to {epochs:g} epochs")
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(self._rung, total=packs)

    def pack(self, index: int, members: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task,
                                  description=f"{self._rung}, pack {index + 1}: {members} members")

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)
