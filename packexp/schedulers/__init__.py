"""The schedulers (``conf/scheduler/``): policies that decide which configurations train, to
how many epochs and when. Pure Python; the runner that carries their decisions out is
``runner.PackedSearch``."""

from packexp.schedulers.asha import Asha, AshaState, promotable
from packexp.schedulers.base import (
    Bracket,
    Decision,
    Exploits,
    HalvingScheduler,
    Plan,
    Planned,
    Retire,
    Rung,
    Scheduler,
    Search,
    bracket_epochs,
    continued,
    schedule,
)
from packexp.schedulers.hyperband import Hyperband, keep_best
from packexp.schedulers.pbt import Pbt

__all__ = ["Asha", "AshaState", "Bracket", "Decision", "Exploits", "HalvingScheduler",
           "Hyperband", "Pbt", "Plan", "Planned", "Retire", "Rung", "Scheduler", "Search",
           "bracket_epochs", "continued", "keep_best", "promotable", "schedule"]
