"""Moved to ``packexp.schedulers`` (``packexp/schedulers/asha.py``); this old name keeps
working, with a DeprecationWarning, and goes in a later release."""

import warnings

from packexp.schedulers import Asha, AshaState, promotable
from packexp.schedulers.asha import hyperband_epochs

warnings.warn("packexp.asha moved to packexp.schedulers", DeprecationWarning, stacklevel=2)

__all__ = ["Asha", "AshaState", "hyperband_epochs", "promotable"]
