"""Who hears a search's events (``events.Listener``), after its study has them: the live
display (``progress``), a scores CSV (``scores_csv``, an example of a listener of your own);
the tracker (``packexp.tracking``) is one too."""

from packexp.listeners.progress import SearchProgress

__all__ = ["SearchProgress"]
