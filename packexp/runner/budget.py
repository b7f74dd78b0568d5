"""When a search stops early (``budget:`` in the config): after so many seconds of searching,
or before a plan that would draw more configurations than allowed. It stops at a pack
boundary: the packs in flight finish and are committed, nothing new starts, the results are
written and the journal says why (``stopped``), so ``resume=true`` with a larger budget goes on
where it stopped, as an unbroken run with that budget would."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packexp.errors import is_number, positive_int

if TYPE_CHECKING:
    from packexp.schedulers.base import Scheduler

# The config key that caps an epoch-capped scheduler's epochs, by the name it gives itself.
EPOCHS_KEY = {"ASHA": "scheduler.max_epochs"}
# ``refuses_draw``'s reason, read back for the budget a resume needs.
_REFUSED = re.compile(r"(\d+) configurations drawn, the next plan draws (\d+)")


@dataclass(frozen=True)
class Budget:
    """``time_s``: seconds of searching, every session of a resumed run counted, each from its
    first pack (``PackedSearch.searched_s``: not the start-up, the calibration or the first
    plan's probes); ``trials``: the most configurations drawn. None: no limit."""

    time_s: float | None = None
    trials: int | None = None

    def __post_init__(self) -> None:
        if self.time_s is not None and not (is_number(self.time_s) and self.time_s > 0):
            raise ValueError(f"time_s={self.time_s!r}: must be null or a number of seconds > 0")
        positive_int("trials", self.trials, optional=True)

    def out_of_time(self, searched_s: float) -> str | None:
        """Why the search stops after ``searched_s`` seconds of searching; None: it goes on."""
        if self.time_s is None or searched_s < self.time_s:
            return None
        return f"budget.time_s={self.time_s:g}: {searched_s:.1f} s searched"

    def refuses_draw(self, drawn: int, draw: int) -> str | None:
        """Why a plan drawing ``draw`` more configurations, after ``drawn``, is not made; None:
        it is."""
        if self.trials is None or drawn + draw <= self.trials:
            return None
        return (f"budget.trials={self.trials}: {drawn} configurations drawn, the next plan "
                f"draws {draw}")

    def ahead(self, scheduler: Scheduler) -> str | None:
        """The line a search under this budget starts with: a time budget is a limit, and
        ``scheduler``'s own end (its brackets, or the epochs it caps, and the key that sets
        them) may come first; a trials budget at or past what it draws never applies. None
        where neither is so (no budget, a trials budget that stops a plan)."""
        brackets = scheduler.brackets()
        draws = sum(b.rungs[0].n for b in brackets)
        title, cap = scheduler.title, scheduler.budget
        said = []
        if self.time_s is not None:
            if cap is None:
                end = (f"after its {len(brackets)} brackets ({draws} configurations, "
                       f"{sum(scheduler.epochs(b) for b in brackets):g} epochs)")
            else:
                key = EPOCHS_KEY.get(title)
                end = (f"once it has trained {cap:g} epochs in all"
                       + (f" ({key}; a larger one searches longer)" if key else ""))
            said.append(f"budget.time_s={self.time_s:g} is a limit, not a target: {title} "
                        f"ends {end}, if that comes first")
        if self.trials is not None and self.trials >= draws:
            said.append(f"budget.trials={self.trials} never applies: {title} draws "
                        f"{draws} configurations in all" if cap is None else
                        f"budget.trials={self.trials} may never apply: {title} draws about "
                        f"{draws} configurations in its {cap:g} epochs")
        return "; ".join(said) or None

    def raised(self, stopped: str) -> str:
        """The override a resume of a search that ``stopped`` (``out_of_time``'s or
        ``refuses_draw``'s reason) goes on with: the budget that stopped it doubled, and a
        trials budget at least what the refused plan needs."""
        if stopped.startswith("budget.time_s="):
            return f"budget.time_s={2 * self.time_s:g}"
        needed = sum(map(int, refused.groups())) if (refused := _REFUSED.search(stopped)) else 0
        return f"budget.trials={max(2 * self.trials, needed)}"


def unscored(stopped: str, resume: str) -> str:
    """What a search its budget stopped before any trial was scored says (``stopped``: why,
    ``resume``: the command that goes on where it stopped)."""
    return (f"the budget ended the search before any trial was scored ({stopped}); no best "
            f"configuration yet: resume it with a larger budget: {resume}")


NO_BUDGET = Budget()
