"""Moved to ``packexp.schedulers`` (``packexp/schedulers/hyperband.py``); this old name keeps
working, with a DeprecationWarning, and goes in a later release."""

import warnings

from packexp.pack_options import steps_for
from packexp.schedulers import Bracket, Hyperband, Rung, bracket_epochs, keep_best

warnings.warn("packexp.hyperband moved to packexp.schedulers (steps_for to "
              "packexp.pack_options)", DeprecationWarning, stacklevel=2)

__all__ = ["Bracket", "Hyperband", "Rung", "bracket_epochs", "keep_best", "steps_for"]
