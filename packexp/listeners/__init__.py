"""Listeners of a search's events (``packexp/events.py``): the journal, the results
collector, the progress display, and what a user adds under ``listeners:`` in the config
(the tracker, ``packexp/tracking/``, is one too)."""

from packexp.listeners.journal import JournalListener
from packexp.listeners.progress import SearchProgress
from packexp.listeners.results import ResultsCollector

__all__ = ["JournalListener", "ResultsCollector", "SearchProgress"]
