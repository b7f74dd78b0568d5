"""The schedulers (``conf/scheduler/``): policies that decide which configurations train, to
how many epochs and when. Pure Python; the search they drive is ``driver.PackedSearch``."""

from packexp.schedulers.asha import Asha, AshaState, promotable
from packexp.schedulers.base import (
    Bracket,
    KeyedPlan,
    Queued,
    Rung,
    Scheduler,
    Search,
    bracket_epochs,
)
from packexp.schedulers.hyperband import Hyperband, keep_best

__all__ = ["Asha", "AshaState", "Bracket", "Hyperband", "KeyedPlan", "Queued", "Rung",
           "Scheduler", "Search", "bracket_epochs", "keep_best", "promotable"]
