"""What every scheduler is: a policy that decides which configurations train, to how many
epochs and when, and drives the search (``runner.PackedSearch``) through its public methods.

Pure Python. The search packs, trains, journals and scores; a scheduler only decides. Ray
Tune's ``TrialScheduler`` has the same shape: a policy over a runner it does not own.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from packexp.checks import flag, one_of, positive_int
from packexp.pack_options import LR_HORIZONS

if TYPE_CHECKING:
    from packexp.events import Exploit
    from packexp.search_space import SearchSpace, Trial


@dataclass(frozen=True)
class Rung:
    """``n`` configurations trained to ``r`` epochs in all."""

    n: int
    r: float


@dataclass(frozen=True)
class Bracket:
    s: int
    rungs: tuple[Rung, ...]


@dataclass(frozen=True)
class Queued:
    """A planned pack waiting for a worker: its rung, its number in the plan, the job
    (``executors.PackJob``) and the rung's context (``strategies.RungContext``, for the
    strategy's prediction when it is dispatched)."""

    rung: int
    index: int
    job: Any
    context: Any


@dataclass(frozen=True)
class KeyedPlan:
    """A journaled plan a resume replays: its rung, its trials, how many it drew."""

    rung: int
    trial_ids: list[str]
    drawn: int


class Search(Protocol):
    """The search as a scheduler drives it (``runner.PackedSearch`` implements it).

    A synchronous scheduler samples a bracket and trains it rung by rung; an asynchronous one
    draws, plans, dispatches and collects packs itself as workers free up; a population's
    (``scheduler=pbt``) trains its members interval by interval and exploits between."""

    def sample(self, bracket: Bracket) -> list[Trial]:
        """Draws ``bracket``'s configurations (a synchronous scheduler's first step)."""

    def train_rung(self, bracket: Bracket, rung: int, trials: list[Trial],
                   epochs: float) -> Mapping[str, float | None]:
        """Packs, trains and scores ``trials`` to ``epochs``; each one's validation accuracy,
        None if it failed."""

    @property
    def max_members(self) -> int:
        """The most members a pack may hold."""

    def trial(self, trial_id: str) -> Trial:
        """A configuration ``draw`` drew, by id."""

    def draw(self, n: int, salt: int, first: int) -> list[Trial]:
        """``n`` new configurations, named ``t<first>`` on, seeded by ``salt``."""

    def plan(self, bracket: Bracket, rung: int, trials: list[Trial], key: str,
             sampled: bool = False) -> list[Queued]:
        """Packs ``trials`` for ``rung`` and journals the plan as ``key``; its packs."""

    def free(self) -> bool:
        """Whether a worker can take a pack now."""

    def busy(self) -> bool:
        """Whether a dispatched pack is still to come back."""

    def dispatch(self, queued: Queued) -> None:
        """Sends a planned pack to a free worker."""

    def collect(self, bracket: Bracket) -> Iterator[tuple[int, Mapping[str, float | None]]]:
        """Waits for the next pack and commits it part by part, yielding after each its rung
        and its members' scores."""

    def release_states(self) -> None:
        """Forgets the end states held in memory (later rungs read checkpoints)."""

    def retire(self, trial_id: str, status: str) -> None:
        """Ends a trial as ``finished``, ``killed`` or ``failed``."""

    def cancel(self) -> None:
        """Drops the packs not yet trained: the search is ending."""

    def replayed_plans(self) -> list[KeyedPlan]:
        """On resume: the journaled plans, in order."""

    def replayed_results(self) -> list[Any]:
        """On resume: the journaled results (``events.RungResult``), in order."""

    def restore(self, result: Any) -> None:
        """On resume: puts a journaled result back in the search's book."""

    def requeue(self, bracket: Bracket) -> list[Queued]:
        """On resume: the journaled plans' packs still to train."""

    seed: int  # the run's root seed
    space: SearchSpace

    def fits(self, donor: Mapping[str, Any], hparams: Mapping[str, Any]) -> bool:
        """Whether a member of ``hparams`` can take the state of one of ``donor``."""

    def replayed_exploits(self) -> dict[int, list[Exploit]]:
        """On resume: a population's journaled exploits, by the interval they end."""

    def exploit(self, bracket: Bracket, rung: int, members: list[Trial],
                exploits: list[Exploit], journaled: bool = False) -> list[Trial]:
        """Journals a population's exploits at interval ``rung``'s end (unless ``journaled``),
        then makes them; returns the members as the next interval trains them."""


class Scheduler(abc.ABC):
    """A schedule of rungs over ``R`` epochs at most, with reduction factor ``eta``.

    With ``continue_on_promotion`` a promoted configuration trains only the epochs its new
    rung adds; without, it retrains from scratch (the paper's prototype).

    ``lr_horizon`` says where a trial's learning-rate schedule (``lr_schedule``) ends:
    ``rung``, at the budget of the rung it trains for, so each rung decays to its end and a
    promoted trial's rate rises again to where the longer horizon puts it; ``trial``, at
    ``R`` epochs, the most it can train, so a promoted trial goes on down one decay.
    """

    #: Epochs the whole search may train, when the scheduler caps them (the progress bar's
    #: total); None: the brackets say.
    budget: float | None = None

    def __init__(self, R: int, eta: int = 3, continue_on_promotion: bool = True,
                 lr_horizon: str = "rung") -> None:
        self.R = positive_int("R", R)
        self.eta = positive_int("eta", eta, 2)
        self.continue_on_promotion = flag("continue_on_promotion", continue_on_promotion)
        self.lr_horizon = one_of("lr_horizon", lr_horizon, LR_HORIZONS)

    @property
    def horizon_epochs(self) -> float | None:
        """Epochs at which schedules end: ``R``, or None for each rung's own budget."""
        return float(self.R) if self.lr_horizon == "trial" else None

    @abc.abstractmethod
    def brackets(self) -> list[Bracket]:
        """The search's brackets, in the order they run (their rungs' ``n`` may be expected
        counts, for a scheduler that decides as results arrive)."""

    @abc.abstractmethod
    def drive(self, search: Search) -> None:
        """Runs the whole search."""

    def epochs(self, bracket: Bracket, continued: bool | None = None) -> float:
        """Epochs a bracket trains in all, with or without continuation on promotion."""
        return bracket_epochs(bracket, self.continue_on_promotion if continued is None
                              else continued)

    def first_draw(self, space: SearchSpace, bracket: Bracket, seed: int, drawn: Sequence[dict],
                   max_members: int) -> list[Trial]:
        """The configurations ``bracket`` starts with, as ``task=plan`` shows them before any
        result: its first rung's."""
        return space.sample(bracket.rungs[0].n, seed, bracket.s, drawn)

    def plan_facts(self) -> dict[str, Any]:
        """What ``task=plan``'s table adds for this scheduler."""
        return {}

    def check_space(self, space: SearchSpace) -> None:  # noqa: B027 (most take any space)
        """Refuses a search space this scheduler cannot search (a ``ConfigError``)."""

    def check_schedule(self) -> None:  # noqa: B027 (a schedule may be any shape)
        """Refuses settings under which the schedule never stops a configuration early (a
        ``ConfigError`` naming the key and the nearest value that works): a search a user
        asked for would silently be plain training of one or a few configurations."""


def bracket_epochs(bracket: Bracket, continued: bool) -> float:
    """Epochs ``bracket``'s rungs train in all: each promoted configuration only the epochs
    its rung adds when ``continued``, all of them otherwise."""
    total, before = 0.0, 0.0
    for rung in bracket.rungs:
        total += rung.n * (rung.r - before if continued else rung.r)
        before = rung.r
    return total
