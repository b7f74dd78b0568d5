"""The leaders of a search by one objective: each trial's best result and the top ``k``
trials, kept as results arrive, so the best and the kept models cost a step per result, not a
pass over every trial drawn. Pure Python.

The ranking is ``Study.best``'s and ``keep_models``'s: a trial stands at its best rung (of two
as good, the later epoch, then the earlier rung); trials by that score, of two as good the
later epoch, then the trial drawn first. A trial's standing only rises as its results arrive,
so a trial that leaves the top can come back only when its own standing rises, which is when
it is looked at again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packexp.objectives import Objective
    from packexp.records.record import RungResult

#: A standing: (score, epochs, -draw order): higher is better, and no two trials tie.
Standing = tuple[float, float, int]


class Leaders:
    """Each trial's best result by ``objective.score`` and the ``k`` best trials, of those
    it ``admits`` (every trial, but in a search over stand-ins: the full-width ones).

    Args:
        objective: What ranks the results (its ``score``: under several goals, the first's).
        k: How many leaders to keep in order (``widen`` raises it).
    """

    def __init__(self, objective: Objective, k: int = 1) -> None:
        self.objective = objective
        self.k = max(1, k)
        self.admits: Callable[[str], bool] = lambda trial_id: True  # whose results rank
        self._drawn: dict[str, int] = {}  # trial -> its place in the draw order
        self._best: dict[str, tuple[Standing, RungResult]] = {}
        self._top: list[tuple[Standing, str]] = []  # ascending: the best last

    def drawn(self, trial_id: str) -> None:
        """A trial drawn (before its results); the draw order breaks ties."""
        self._drawn.setdefault(trial_id, len(self._drawn))

    def order(self, trial_id: str) -> int:
        """The trial's place in the draw order."""
        return self._drawn[trial_id]

    def standing(self, result: RungResult) -> Standing | None:
        score = self.objective.score(result)
        if score is None or not self.admits(result.trial_id):
            return None
        return score, float(result.epochs), -self._drawn[result.trial_id]

    def add(self, result: RungResult) -> None:
        """A result recorded: its trial's standing and the top, updated."""
        standing = self.standing(result)
        if standing is None:
            return
        trial_id = result.trial_id
        before = self._best.get(trial_id)
        if before is not None and standing <= before[0]:
            return
        self._best[trial_id] = standing, result
        top = self._top
        if before is not None and top and before[0] >= top[0][0]:
            i = bisect.bisect_left(top, (before[0], trial_id))
            if i < len(top) and top[i] == (before[0], trial_id):
                del top[i]
        if len(top) < self.k or standing > top[0][0]:
            bisect.insort(top, (standing, trial_id))
            if len(top) > self.k:
                del top[0]

    def widen(self, k: int) -> None:
        """Keeps the top ``k`` from now on (ranked again once, from each trial's best)."""
        if k > self.k:
            self.k = k
            self._top = sorted((s, t) for t, (s, _) in self._best.items())[-k:]

    def best(self) -> RungResult | None:
        """The best result so far; None before any is scored."""
        return self._best[self._top[-1][1]][1] if self._top else None

    def top(self, k: int, extra: Iterable[RungResult] = ()) -> dict[str, RungResult]:
        """The ``k`` best trials' best results, best first, as if
        ``extra`` (results not yet recorded) were; a ``k`` above ``self.k`` widens it."""
        self.widen(k)
        entries = {t: (s, self._best[t][1]) for s, t in self._top}
        for result in extra:
            standing = self.standing(result)
            if standing is None:
                continue
            known = entries.get(result.trial_id) or self._best.get(result.trial_id)
            if known is None or standing > known[0]:
                entries[result.trial_id] = standing, result
        ranked = sorted(entries.items(), key=lambda e: e[1][0], reverse=True)[:k]
        return {t: r for t, (_, r) in ranked}
