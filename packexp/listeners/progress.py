"""The progress display as a listener: a live view of the search on a terminal or in a
Jupyter notebook; silent elsewhere (a pipe, a log file, CI)."""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import IO, Any

from rich.console import Console
from rich.file_proxy import FileProxy
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
        self._moved: list[tuple[logging.StreamHandler, IO[str]]] = []  # (handler, stream)

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
            if self.console.is_terminal:  # a notebook draws its bar as a widget apart
                try:
                    self._log_above()
                except BaseException:
                    self.__exit__()  # the streams given back and the bar stopped
                    raise
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            for handler, stream in self._moved:
                handler.setStream(stream)
            self._moved.clear()
            self._progress.stop()

    def _log_above(self) -> None:
        """Sends the log's handlers to the terminal (Hydra's console handler, the warnings of
        ``packexp.tune``) through rich's redirected ``sys.stdout`` and ``sys.stderr`` while
        the bar shows, so each record is printed above the bar on a line of its own: a
        handler holds the stream it was given, not ``sys.stdout``, and would write into the
        bar's line. Handlers to files, pipes and other streams are left alone."""
        proxies = {id(proxy.rich_proxied_file): proxy for proxy in (sys.stdout, sys.stderr)
                   if isinstance(proxy, FileProxy)}
        known = list(logging.Logger.manager.loggerDict.values())  # a copy: it may grow
        loggers = [logging.root, *(logger for logger in known
                                   if isinstance(logger, logging.Logger))]
        for handler in {id(h): h for logger in loggers for h in logger.handlers}.values():
            if not isinstance(handler, logging.StreamHandler):
                continue
            stream = handler.stream
            if id(stream) in proxies and (stream is self.console.file or stream.isatty()):
                self._moved.append((handler, handler.setStream(proxies[id(stream)])))

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
