"""How a search's stand-ins ranked against their full-width trials (``surrogate``): each
transferred configuration's two scores, and their rank correlation. Pure Python."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.record import TrialRecord

#: A full-width trial's id: ``full-`` and its stand-in's, so the two read side by side.
PREFIX = "full-"
#: A trial's hyper-parameter naming the width divisor it trains at: absent, the search's
#: ``surrogate.scale``; 1 for the full-width trials the transfer trains.
SCALE_KEY = "surrogate_scale"


@dataclass(frozen=True)
class Transferred:
    """One configuration trained as a stand-in and again at full width: each trial's id,
    its score by the objective at its best rung (None where unscored) and the epochs there."""

    stand_in: str
    full: str
    stand_in_value: float | None
    full_value: float | None
    stand_in_epochs: float | None
    full_epochs: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def transferred(trials: Sequence[TrialRecord], objective: Objective) -> tuple[Transferred, ...]:
    """Each full-width trial of ``trials`` beside its stand-in, in the order trained."""
    by_id = {t.trial_id: t for t in trials}

    def best(trial: TrialRecord | None) -> tuple[float | None, float | None]:
        scored = [(objective.score(r), r.epochs, r) for r in (trial.rungs if trial else ())
                  if objective.score(r) is not None]
        if not scored:
            return None, None
        _, epochs, rung = max(scored, key=lambda s: (s[0], s[1]))
        return objective.value(rung), float(epochs)

    out = []
    for t in trials:
        if t.trial_id.startswith(PREFIX):
            source = t.trial_id[len(PREFIX):]
            (sv, se), (fv, fe) = best(by_id.get(source)), best(t)
            out.append(Transferred(source, t.trial_id, sv, fv, se, fe))
    return tuple(out)


def rank_correlation(pairs: Sequence[Transferred]) -> float | None:
    """Spearman's correlation of the stand-ins' and the full-width scores, over the pairs
    with both; None below two such pairs (or where either side has no spread)."""
    import pandas as pd

    both = [(p.stand_in_value, p.full_value) for p in pairs
            if p.stand_in_value is not None and p.full_value is not None]
    if len(both) < 2:
        return None
    a, b = pd.Series([x for x, _ in both]), pd.Series([y for _, y in both])
    rho = a.corr(b, method="spearman")
    return None if pd.isna(rho) else float(rho)
