"""The progress display as a listener: a live view of the search on a terminal or in a
Jupyter notebook; silent elsewhere (a pipe, a log file, CI)."""

from __future__ import annotations

import importlib.util
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from packexp.events import Listener, PackFinished, PackStarted, RungPlanned
from packexp.records.report import verbose


class SearchProgress(Listener):
    """Shows bracket, rung, pack, members, epochs and elapsed time while packs train.

    Args:
        scheduler: The search's scheduler (``schedulers.Scheduler``), for the bracket count
            and the epoch budget.
        console: Where to draw; the display is off unless it is a terminal or a notebook
            with ipywidgets (rich draws a notebook's live display as a widget).
    """

    def __init__(self, scheduler: Any, console: Console | None = None) -> None:
        self.console = console or Console()
        self.brackets = len(scheduler.brackets())
        # A scheduler that caps the epochs (ASHA, PBT) plans a rung many times: one bar of
        # them, under its name.
        self.budget = scheduler.budget
        self.title = scheduler.title
        self._progress: Progress | None = None
        self._task = None
        self._rung = ""

    @property
    def enabled(self) -> bool:
        if not verbose.get():
            return False
        if self.console.is_terminal:
            return True
        return self.console.is_jupyter and importlib.util.find_spec("ipywidgets") is not None

    def __enter__(self) -> SearchProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), console=self.console,
                transient=True)
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def on_rung_planned(self, event: RungPlanned) -> None:
        if self._progress is None:
            return
        if self.budget is not None:
            if self._task is None:
                self._task = self._progress.add_task(self.title, total=self.budget,
                                                     unit="epochs")
            return
        self._rung = (f"bracket {self.brackets - event.bracket}/{self.brackets} "
                      f"(s={event.bracket}) rung {event.rung} to {event.epochs:g} epochs")
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(self._rung, total=len(event.packs), unit="packs")

    def on_pack_started(self, event: PackStarted) -> None:
        if self._progress is not None and self._task is not None and self.budget is not None:
            self._progress.update(self._task, description=f"{self.title}: pack {event.key}, "
                                  f"{len(event.members)} members")
        elif self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{self._rung}, pack "
                                  f"{event.index + 1}: {len(event.members)} members")

    def on_pack_finished(self, event: PackFinished) -> None:
        if self._progress is not None and self._task is not None:
            if self.budget is not None:  # the search's epochs so far, a resume's included
                self._progress.update(self._task, completed=event.epochs_spent)
            else:
                self._progress.advance(self._task)
