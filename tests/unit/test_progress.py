"""The progress bar on a terminal: each log record is printed above the bar on a line of its
own (Hydra's console handler holds the stream it was given, which would write into the bar's
line), and the handler gets its stream back when the bar ends."""

from __future__ import annotations

import io
import logging
import re
import sys

from rich.console import Console

from packexp.events import Listener, PackFinished
from packexp.listeners import SearchProgress
from packexp.testing.fake_trainer import HYPERBAND, FakeTrainer, fake_search


def test_log_records_are_lines_of_their_own_above_the_bar(tmp_path, monkeypatch):
    screen = io.StringIO()  # the terminal: the console and the log's handler both write to it
    monkeypatch.setattr(sys, "stdout", screen)
    handler = logging.StreamHandler(screen)
    handler.setFormatter(logging.Formatter("[LOG] %(message)s"))
    log = logging.getLogger("packexp.test_progress")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    monkeypatch.setattr(log, "propagate", False)
    search = fake_search(tmp_path, FakeTrainer(), HYPERBAND.brackets())
    try:
        with SearchProgress(HYPERBAND, Console(file=screen, force_terminal=True,
                                               width=120)) as bar:
            search.listeners.listeners.append(bar)
            search.listeners.listeners.append(Logs(log))
            search.run(HYPERBAND)
        assert handler.stream is screen  # given back
        log.info("after the bar")
    finally:
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
    text = screen.getvalue()
    starts = [m.start() for m in re.finditer(re.escape("[LOG] "), text)]
    assert len(starts) == len(search.packs) + 1
    # Each begins a line: after a newline, or where the display erased the bar's line.
    glued = [text[i - 40:i + 20] for i in starts
             if not (text[:i].endswith("\n") or text[:i].endswith("\x1b[2K"))]
    assert not glued, glued
    assert "bracket 1/" in text  # the bar was drawn


class Logs(Listener):
    """Logs a line at each pack's end, while the bar shows."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log

    def on_pack_finished(self, event: PackFinished) -> None:
        self.log.info("pack %s finished", event.pack.pack_id)
