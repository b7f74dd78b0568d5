"""Which trained models a search keeps (``keep_models``): the best, the Pareto front, the top
k or none, each from the rung whose score is reported. Pure Python: the states are files
(``CheckpointStore``), turned into Keras models at the end (``packing.export``).

Under one objective a result that is not among the kept when it is scored never will be (a
later result only pushes it further down), so only the candidates' states are written, and
those that drop out go. Under several objectives a trial is ranked at its last scored rung
and a front can grow back as a dominating trial scores worse on, so each trial's last scored
state is kept until the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packexp.objectives import Objective, fronts, order
from packexp.records.record import RungResult

if TYPE_CHECKING:
    from packexp.runner.study import Study

BEST = "best"
NONE = "none"


def keep_setting(value: Any) -> str | int:
    """``keep_models`` checked: ``best`` (under several objectives, the Pareto front),
    ``front`` (the same), ``none``, or a positive count (the top k trials)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"keep_models={value!r}: must be best, front, none or a number of "
                         "trials (the top k)")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"keep_models={value}: must be at least 1 (or none)")
        return value
    if str(value) in (BEST, "front"):
        return BEST
    if str(value) == NONE:
        return NONE
    raise ValueError(f"keep_models={value!r}: must be best, front, none or a number of "
                     "trials (the top k)")


@dataclass(frozen=True)
class KeepModels:
    """What ``keep_models`` keeps, for the search's ``objective``."""

    which: str | int = BEST
    objective: Objective | None = None

    @property
    def keeps(self) -> bool:
        return self.which != NONE

    @property
    def top_k(self) -> int:
        """How many trials it keeps under one objective (1 for the best, none: 0)."""
        if not self.keeps:
            return 0
        return 1 if self.which == BEST else int(self.which)

    def chosen(self, study: Study, extra: Sequence[RungResult] = ()) -> dict[str, RungResult]:
        """Each kept trial's result whose weights are kept, best first: among ``study``'s
        trials as they stand with ``extra`` (a pack's results not yet recorded) added. Under
        one objective ``study.leaders`` (which must keep ``top_k``) answers it in a step per
        leader; under several every trial's last scored rung is ranked."""
        if not self.keeps or self.objective is None:
            return {}
        objective = self.objective
        if not objective.several:  # each trial at its best rung, as ``Study.best`` ranks
            return study.leaders.top(self.top_k, extra)
        rungs: dict[str, list[RungResult]] = {t: list(r.rungs) for t, r in study.trials.items()}
        for result in extra:
            rungs.setdefault(result.trial_id, []).append(result)
        last = [(t, scored[-1]) for t, results in rungs.items()
                if (scored := [r for r in results if objective.scores(r) is not None])]
        if self.which == BEST:
            front = fronts([objective.scores(r) for _, r in last])[0] if last else []
            return {last[i][0]: last[i][1] for i in front}
        ranked = order([objective.scores(r) for _, r in last])
        return {last[i][0]: last[i][1] for i in ranked[: int(self.which)]}

    def candidates(self, study: Study, results: Iterable[RungResult]) -> list[RungResult]:
        """Of a pack's ``results``, those whose states must be written now: under one
        objective those kept as things stand, under several every scored one."""
        results = list(results)
        if not self.keeps or self.objective is None:
            return []
        if self.objective.several:
            return [r for r in results if self.objective.scores(r) is not None]
        chosen = self.chosen(study, results)
        return [r for r in results if chosen.get(r.trial_id) is r]

    def wanted(self, study: Study, pack: Sequence[str]
               ) -> tuple[set[tuple[str, int]], set[str] | None]:
        """The kept states still needed once a pack's results are recorded, as (trial, rung),
        and the trials that answer covers (None: every trial): under one objective the
        chosen results; under several, the pack's trials' last scored rungs."""
        objective = self.objective
        if objective is None or not objective.several:
            return {(t, r.rung) for t, r in self.chosen(study).items()}, None
        last = {t: [r for r in study.trials[t].rungs if objective.scores(r) is not None]
                for t in pack}
        return {(t, scored[-1].rung) for t, scored in last.items() if scored}, set(pack)


NO_MODELS = KeepModels(NONE)  # a search that hands over no model
