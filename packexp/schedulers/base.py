"""What every scheduler is: a policy. It is told what happened (a plan made, a member's result,
a population's exploits) and, whenever a worker is free, decides what to do next (``Plan``,
``Retire``, ``Exploits``). Pure Python.

One runner (``runner.PackedSearch``) owns the loop for every scheduler: it asks the policy,
packs and trains what it plans, and tells it each result. Synchronous Hyperband is "plan the
rung, wait for all of it"; ASHA plans whenever a worker is free; a population plans each
interval and exploits between. A resume tells the policy the journal's facts in the order they
happened, so no scheduler has resume code of its own. Ray Tune's ``TrialScheduler``
(``on_trial_result -> CONTINUE/STOP``) has the same shape: a policy over a runner it does not
own.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from packexp.errors import flag, one_of, positive_int
from packexp.space.options import LR_HORIZONS

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.record import Exploit, Exploited, RungResult
    from packexp.space import SearchSpace, Trial


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
class Plan:
    """A decision: train ``trial_ids``, and ``draw`` new configurations, to rung ``rung`` of
    bracket ``bracket``.

    ``key`` None: a synchronous rung, named ``b<s>-r<rung>``; its packs are committed in plan
    order, and its draw is its bracket's, told the brackets before it. Else the plan's own name
    (its packs are ``<key>-p<j>``); its draw is told every result so far, seeded by the plan's
    number among the keyed plans, and named ``t<i>`` on from the configurations drawn so far.

    ``given``: configurations to start as they are, not drawn (a keyed plan's), each
    ``(trial_id, hparams, seed)``: the full-width trials of a search over stand-ins
    (``surrogate.transfer``). A resume knows them again as it knows a keyed plan's draws.
    """

    bracket: int
    rung: int
    trial_ids: tuple[str, ...] = ()
    draw: int = 0
    key: str | None = None
    given: tuple[tuple[str, Mapping[str, Any], int], ...] = ()


@dataclass(frozen=True)
class Retire:
    """A decision: ``trial_id`` trains no further, as ``finished`` or ``killed``."""

    trial_id: str
    status: str


@dataclass(frozen=True)
class Exploits:
    """A decision: rung ``rung`` ends with these continuations: each member named continues
    from its donor's end state of the rung (its weights and optimizer state), with its donor's
    data order (seed) and new values (``Exploit.hparams``). Any policy may decide it; a
    population's exploits (``pbt``) are one use. The runner carries it out (``continued``)."""

    bracket: int
    rung: int
    exploits: tuple[Exploit, ...]


Decision = Plan | Retire | Exploits


@dataclass(frozen=True)
class Planned:
    """A fact: a plan made now, or read back from the journal. ``trials``: its members in the
    order decided (those drawn last, in draw order); ``drawn``: how many it drew."""

    bracket: int
    rung: int
    trials: tuple[Trial, ...]
    drawn: int = 0
    key: str | None = None

    @property
    def trial_ids(self) -> list[str]:
        return [t.trial_id for t in self.trials]


class Search(Protocol):
    """What a policy may ask of the search it decides for (``runner.PackedSearch``)."""

    seed: int  # the run's root seed
    space: SearchSpace
    objective: Objective  # what ranks the results (``objectives``)

    @property
    def max_members(self) -> int:
        """The most members a pack may hold."""

    def fits(self, donor: Mapping[str, Any], hparams: Mapping[str, Any]) -> bool:
        """Whether a member of ``hparams`` can take the state of one of ``donor``."""


class Scheduler(abc.ABC):
    """A policy over a schedule of rungs in which no configuration trains more than ``R``
    epochs.

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
    #: The scheduler's name as the progress bar, the plan table and the log say it.
    title: ClassVar[str] = "a schedule of rungs"
    #: Whether it makes exploits (``on_exploits``): a model's weights then come from the
    #: stretches of its lineage, which a refit trains again (``app/tasks/refit.py``).
    explores: ClassVar[bool] = False
    #: A halving scheduler's reduction factor; None for one that halves nothing by it.
    eta: int | None = None

    def __init__(self, R: int, continue_on_promotion: bool = True,
                 lr_horizon: str = "rung") -> None:
        self.R = positive_int("R", R)
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

    #: Whether the runner forgets members' end states after each round of decisions (a later
    #: plan reads their checkpoints): for a policy whose next plan may come much later. A
    #: synchronous one plans the next rung from the states it just made, kept in memory.
    releases_states: ClassVar[bool] = False

    def start(self, search: Search) -> None:
        """Readies the policy for ``search``, forgetting any search before."""
        self.search = search

    @abc.abstractmethod
    def decide(self, queued: int) -> list[Decision]:
        """What to do now that a worker is free and ``queued`` planned packs wait for one; []:
        wait for results. Changes nothing itself: the runner carries the decisions out, in
        order, and tells the policy what it did (``on_plan``, ``on_exploits``)."""

    @abc.abstractmethod
    def on_plan(self, plan: Planned) -> list[Retire]:
        """A plan was made (or a resume read it back); the trials to retire now."""

    @abc.abstractmethod
    def on_result(self, result: RungResult) -> list[Retire]:
        """A member's result of a rung (a resume's come from the journal, in its order); the
        trials to retire now."""

    def on_exploits(self, decision: Exploits) -> None:
        """A population's exploits were made (or a resume read them back)."""
        raise NotImplementedError(f"{type(self).__name__} makes no exploits")

    def on_stop(self) -> list[Decision]:
        """What a search its budget stopped still carries out once its packs in flight are
        in, the budget no longer counted: its closing step (a search over stand-ins trains
        its best so far at full width); none for most policies."""
        return []

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

    def plan_title(self, brackets: int) -> str:
        """``task=plan``'s table title for the schedule of ``brackets`` brackets."""
        return f"{self.title} R={self.R}: {brackets} brackets"

    @property
    def budget_name(self) -> str:
        """The budget in a run's name: ``R<R>`` (a population's: ``P<population>E<epochs>``)."""
        return f"R{self.R}"

    def check_space(self, space: SearchSpace) -> None:  # noqa: B027 (most take any space)
        """Refuses a search space this scheduler cannot search (a ``ConfigError``)."""

    def check_objective(self, objective: Objective) -> None:  # noqa: B027 (most rank any)
        """Refuses an objective this scheduler cannot rank by (a ``ConfigError``)."""

    def check_schedule(self) -> None:  # noqa: B027 (a schedule may be any shape)
        """Refuses settings under which the schedule never stops a configuration early (a
        ``ConfigError`` naming the key and the nearest value that works): a search a user
        asked for would silently be plain training of one or a few configurations."""


class HalvingScheduler(Scheduler):
    """A scheduler that keeps the top ``1/eta`` of a rung's configurations for the next
    (Hyperband, ASHA)."""

    def __init__(self, R: int, eta: int = 3, continue_on_promotion: bool = True,
                 lr_horizon: str = "rung") -> None:
        super().__init__(R, continue_on_promotion, lr_horizon)
        self.eta = positive_int("eta", eta, 2)

    def plan_title(self, brackets: int) -> str:
        return f"{self.title} R={self.R}, eta={self.eta}: {brackets} brackets"


def bracket_epochs(bracket: Bracket, continued: bool) -> float:
    """Epochs ``bracket``'s rungs train in all: each promoted configuration only the epochs
    its rung adds when ``continued``, all of them otherwise."""
    total, before = 0.0, 0.0
    for rung in bracket.rungs:
        total += rung.n * (rung.r - before if continued else rung.r)
        before = rung.r
    return total


def continued(members: Sequence[Trial], exploits: Sequence[Exploit],
              space: SearchSpace) -> list[Trial]:
    """The members as the next rung trains them after ``exploits``: each one named with its
    exploit's values and its donor's data order (seed), so with the donor's values it would
    train exactly as the donor."""
    new, by_id = {e.member: e for e in exploits}, {t.trial_id: t for t in members}
    return [dataclasses.replace(t, hparams=dict(new[t.trial_id].hparams),
                                features=space.features(new[t.trial_id].hparams),
                                seed=by_id[new[t.trial_id].donor].seed)
            if t.trial_id in new else t for t in members]


def schedule(member: str, epochs: float, lineage: Mapping[str, Sequence[Exploited]],
             initial: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The hyper-parameter schedule that produced ``member``'s weights at ``epochs``: its
    stretches from epoch 0, each ``{"from", "to", "trial_id", "hparams"}``, following each
    exploit back to the donor whose weights it copied.

    Args:
        lineage: Each member's exploits in order (``records.record.Exploited``).
        initial: Each member's hyper-parameters as drawn.
    """
    stretches: list[dict[str, Any]] = []
    who, end = member, epochs
    while True:
        earlier = [e for e in lineage.get(who, ()) if e.epoch < end]
        if not earlier:
            stretches.append({"from": 0.0, "to": end, "trial_id": who,
                              "hparams": dict(initial[who])})
            break
        last = earlier[-1]
        stretches.append({"from": float(last.epoch), "to": end, "trial_id": who,
                          "hparams": dict(last.hparams)})
        who, end = last.donor, float(last.epoch)
    return stretches[::-1]
