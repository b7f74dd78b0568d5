"""What a search states besides its trials and packs (``SearchFacts``, ``SearchTotals``), and
what a reader of a finished search reads of it (``Searched``: the summary, plots, metrics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.best import Best, FrontPoint
    from packexp.records.record import PackRecord, TrialRecord


@dataclass(frozen=True)
class SearchFacts:
    """What the task states of its search: names, seed, schedule, setup and timings. Each
    field is a ``results.json`` key of the same name; ``simulated``, ``simulation`` and
    ``real_wall_time_s`` only a simulated executor's, ``mlflow_model`` and ``refit`` only where
    made; ``extra``: keys this release does not know (a newer release's), kept as read."""

    resumed: bool = False
    strategy: str | None = None
    model: str | None = None
    dataset: str | None = None
    sampler: str | None = None
    scheduler: str | None = None
    seed: int | None = None
    R: int | None = None
    eta: float | None = None
    continue_on_promotion: bool | None = None
    lr_horizon: float | None = None
    calibration_s: float | None = None
    calibration: Mapping[str, Any] | None = None
    startup_s: float | None = None  # the command's start to the first pack
    startup: Mapping[str, float] | None = None  # startup_s by phase
    capacity: Mapping[str, Any] | None = None
    memory_probes: Mapping[str, Any] | None = None
    workers: Any = None
    stopped: str | None = None  # why the search stopped early (its budget)
    ended: str | None = None  # what ended it: ENDS' (of ``stopped`` where not read)
    simulated: bool = False
    simulation: Mapping[str, Any] | None = None
    real_wall_time_s: float | None = None
    mlflow_model: str | None = None
    refit: Mapping[str, Any] | None = None
    surrogate: Mapping[str, Any] | None = None  # a search over stand-ins: scale, transfer
    extra: Mapping[str, Any] = field(default_factory=dict)

    SIMULATED = ("simulated", "simulation", "real_wall_time_s")
    MADE = ("mlflow_model", "refit")
    WHERE_SET = ("surrogate",)  # written only where set

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> SearchFacts:
        """The facts ``values`` (``results.json``'s keys) state; ``ended``, which an older
        release did not write, from ``stopped``."""
        values = {"ended": ended_by(values.get("stopped")), **values}
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in values.items() if k in known},
                   extra={k: v for k, v in values.items() if k not in known})

    def head(self) -> dict[str, Any]:
        """The keys ``results.json`` opens with."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("extra", *self.MADE)
               and (f.name not in self.WHERE_SET or getattr(self, f.name) is not None)}
        if not self.simulated:
            for k in self.SIMULATED:
                del out[k]
        return out

    def tail(self) -> dict[str, Any]:
        """The keys ``results.json`` closes with: what was made after the search."""
        return {**{k: getattr(self, k) for k in self.MADE if getattr(self, k) is not None},
                **self.extra}


# What can end a search (``SearchFacts.ended``): its scheduler's schedule, run to its end
# (Hyperband's brackets, ASHA's max_epochs or num_configs, PBT's epochs), or the budget that
# stopped it early. An interrupted search writes no results.
ENDS = ("schedule", "budget.time_s", "budget.trials")


def ended_by(stopped: str | None) -> str:
    """What ended a search that ``stopped`` says stopped early (``budget.time_s=60: ...``), or
    its schedule's end where None."""
    return "schedule" if stopped is None else stopped.split("=", 1)[0]


@dataclass(frozen=True)
class SearchTotals:
    """The packs and trials summed up (``records.results.totals``): time by phase, the
    training share of the search's time, reuse, programs built, the cost model's median
    error, the epochs spent, and the best value so far at each pack's end (``anytime``)."""

    phases: Mapping[str, float] = field(default_factory=dict)
    train_share: float = 0.0
    reused_packs: int = 0
    programs: int = 0
    eval_programs: int = 0
    reused_members: int = 0
    prediction_error: float | None = None
    epochs_spent: float = 0.0
    anytime: Sequence[Mapping[str, Any]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Searched(Protocol):
    """A finished search as its readers take it (``records.search_result.SearchResult`` is
    one): the arithmetic, the plots and the summary, which the result's own methods call."""

    run_dir: Path
    trial_records: tuple[TrialRecord, ...]
    pack_records: tuple[PackRecord, ...]
    best: Best | None
    tuned_for: Objective
    wall_time_s: float
    facts: SearchFacts
    totals: SearchTotals
    front: tuple[FrontPoint, ...] | None
    kept: Mapping[str, Mapping[str, Any]]
