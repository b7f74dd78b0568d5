"""When a search stops early (``budget:`` in the config): after so many seconds of searching,
or before a plan that would draw more configurations than allowed. It stops at a pack
boundary: the packs in flight finish and are committed, nothing new starts, the results are
written and the journal says why (``stopped``), so ``resume=true`` with a larger budget goes on
where it stopped, as an unbroken run with that budget would."""

from __future__ import annotations

from dataclasses import dataclass

from packexp.errors import is_number, positive_int


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


def unscored(stopped: str, resume: str) -> str:
    """What a search its budget stopped before any trial was scored says (``stopped``: why,
    ``resume``: the command that goes on where it stopped)."""
    return (f"the budget ended the search before any trial was scored ({stopped}); no best "
            f"configuration yet: resume it with a larger budget: {resume}")


NO_BUDGET = Budget()
