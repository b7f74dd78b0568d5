"""Asynchronous successive halving (ASHA, Li et al. 2020): its rungs, budget and promotion rule.

Pure Python. The driver's loop over it is ``PackedSearch.run_asha`` (``packexp/asha_driver.py``):
whenever a worker is free, promotions are planned first, then new configurations, and the
packs go out as workers free up, so no worker waits at a rung's end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from packexp.hyperband import Bracket, Hyperband, Rung, bracket_epochs
from packexp.pack_options import LR_HORIZONS


class Asha:
    """ASHA with promotions: a trial is promoted to the next rung as soon as it is in the top
    ``1/eta`` of its rung's results so far, and continues from its checkpoint.

    Rungs train to ``min_r * eta**k`` epochs, up to ``R`` (the top rung is ``R`` even when it
    is not such a power). New configurations are drawn while the budget lasts: at most
    ``num_configs`` of them, and never past ``max_epochs`` epochs planned in all (every
    member's epochs summed, a promotion counting those its rung adds).

    Args:
        R: Most epochs a configuration trains for.
        eta: Reduction factor: a rung promotes its top ``1/eta``.
        min_r: Epochs of the first rung.
        num_configs: Most configurations to draw; None: as many as the budget allows.
        max_epochs: Epochs the search may train; None: what synchronous Hyperband with the
            same ``R`` and ``eta`` trains, so the two compare at equal budget.
        sample_size: New configurations drawn at once when nothing is ready to promote,
            packed together by the strategy; None: the most members a pack may hold.
        continue_on_promotion, lr_horizon: As for ``Hyperband``.
    """

    asynchronous = True
    s_max = 0  # one bracket: the progress display and the strategies' context read it

    def __init__(self, R: int, eta: int = 3, min_r: float = 1, num_configs: int | None = None,
                 max_epochs: float | None = None, sample_size: int | None = None,
                 continue_on_promotion: bool = True, lr_horizon: str = "rung") -> None:
        for name, value, low in (("R", R, 1), ("eta", eta, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r}: must be an integer >= {low}")
        if isinstance(min_r, bool) or not isinstance(min_r, int | float) or not 0 < min_r <= R:
            raise ValueError(f"min_r={min_r!r}: must be a number of epochs in (0, R={R}]")
        for name, value in (("num_configs", num_configs), ("sample_size", sample_size)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name}={value!r}: must be null or an integer >= 1")
        if max_epochs is not None and (isinstance(max_epochs, bool)
                                       or not isinstance(max_epochs, int | float)
                                       or max_epochs < min_r):
            raise ValueError(f"max_epochs={max_epochs!r}: must be null or at least min_r="
                             f"{min_r}")
        if not isinstance(continue_on_promotion, bool):
            raise ValueError(f"continue_on_promotion={continue_on_promotion!r}: must be true "
                             "or false")
        if lr_horizon not in LR_HORIZONS:
            raise ValueError(f"lr_horizon={lr_horizon!r}: must be {' or '.join(LR_HORIZONS)}")
        self.R, self.eta, self.min_r = R, eta, min_r
        self.num_configs, self.sample_size = num_configs, sample_size
        self.continue_on_promotion, self.lr_horizon = continue_on_promotion, lr_horizon
        self.max_epochs = float(max_epochs) if max_epochs is not None else hyperband_epochs(
            Hyperband(R, eta, continue_on_promotion))

    @property
    def rungs(self) -> list[float]:
        """Each rung's epochs: ``min_r * eta**k`` below ``R``, then ``R``."""
        rungs, r = [], float(self.min_r)
        while r < self.R - 1e-9:
            rungs.append(r)
            r *= self.eta
        return [*rungs, float(self.R)]

    @property
    def horizon_epochs(self) -> float | None:
        return float(self.R) if self.lr_horizon == "trial" else None

    def bracket(self) -> Bracket:
        """The one bracket every trial belongs to; its rungs' ``n`` are expected counts: the
        configurations ``num_configs`` or the budget allows, ``1/eta`` of them promoted at each
        rung."""
        per_config = sum(self.cost(k) / self.eta**k for k in range(len(self.rungs)))
        n = self.num_configs or max(1, int(self.max_epochs / per_config))
        return Bracket(s=0, rungs=tuple(Rung(n=n // self.eta**k, r=r)
                                        for k, r in enumerate(self.rungs)))

    def brackets(self) -> list[Bracket]:
        return [self.bracket()]

    def epochs(self, bracket: Bracket, continued: bool | None = None) -> float:
        """Epochs the bracket's expected counts train (``task=plan``'s table); the search
        itself stops at ``max_epochs``."""
        return bracket_epochs(bracket, self.continue_on_promotion if continued is None
                              else continued)

    def cost(self, rung: int) -> float:
        """Epochs a member trains to reach ``rung`` from the rung below."""
        rungs = self.rungs
        below = rungs[rung - 1] if rung and self.continue_on_promotion else 0.0
        return rungs[rung] - below

    def drive(self, search: Any) -> None:
        """Runs the search (``driver.PackedSearch``) under this schedule."""
        search.run_asha(self)


def hyperband_epochs(hyperband: Hyperband) -> float:
    """Epochs synchronous Hyperband trains in all: ASHA's default budget."""
    return sum(hyperband.epochs(b) for b in hyperband.brackets())


def promotable(results: Sequence[Sequence[tuple[str, float | None]]],
               promoted: Sequence[set[str]] | Mapping[int, set[str]], eta: int
               ) -> list[tuple[str, int]]:
    """The trials ASHA's ``get_job`` would promote, in the order it would, and to which rung.

    For each rung ``k`` from the top down: the top ``floor(len(results[k]) / eta)`` of its
    results so far (``top_k`` of the paper's Algorithm 2), less those promoted already, best
    first. Ties keep arrival order; failed results (None or NaN) rank last and are never
    promoted. The top rung's trials are done, so its results promote nothing.

    Args:
        results: Per rung, ``(trial_id, score)`` in the order the results arrived.
        promoted: Per rung, the trials promoted out of it.
        eta: The reduction factor.

    Returns:
        ``(trial_id, rung to train to)``, the higher rungs' first.
    """
    out = []
    for k in range(len(results) - 2, -1, -1):
        def rank(i: int, scores=results[k]) -> tuple[float, int]:
            score = scores[i][1]
            return (-score if _valid(score) else math.inf, i)

        top = sorted(range(len(results[k])), key=rank)[:len(results[k]) // eta]
        out += [(results[k][i][0], k + 1) for i in top
                if _valid(results[k][i][1]) and results[k][i][0] not in promoted[k]]
    return out


def _valid(score: float | None) -> bool:
    return score is not None and not math.isnan(score)


class AshaState:
    """What ASHA knows mid-search: each rung's results in arrival order, the trials planned
    for each rung (planned for rung ``k+1``: promoted out of rung ``k``), the epochs planned
    and the configurations drawn. A resume rebuilds it from the journal's plans and results.
    """

    def __init__(self, asha: Asha) -> None:
        self.asha = asha
        rungs = len(asha.rungs)
        self.results: list[list[tuple[str, float | None]]] = [[] for _ in range(rungs)]
        self.planned: list[set[str]] = [set() for _ in range(rungs)]
        self.spent = 0.0  # epochs planned, trained or not
        self.sampled = 0
        self.plans = 0

    @property
    def top(self) -> int:
        return len(self.results) - 1

    def promotions(self) -> list[tuple[str, int]]:
        """The promotions ready, in ``promotable``'s order, as far as the budget goes."""
        out, spent = [], self.spent
        for trial_id, rung in promotable(self.results, self.planned[1:], self.asha.eta):
            if spent + self.asha.cost(rung) <= self.asha.max_epochs + 1e-9:
                out.append((trial_id, rung))
                spent += self.asha.cost(rung)
        return out

    def new_configs(self, limit: int) -> int:
        """How many new configurations to draw now: at most ``limit``, within the budget."""
        n = limit
        if self.asha.num_configs is not None:
            n = min(n, self.asha.num_configs - self.sampled)
        n = min(n, int((self.asha.max_epochs - self.spent + 1e-9) // self.asha.cost(0)))
        return max(0, n)

    def plan(self, rung: int, trial_ids: Sequence[str], drawn: int = 0) -> None:
        """Notes a plan: ``trial_ids`` to train to ``rung``, ``drawn`` of them new."""
        self.planned[rung].update(trial_ids)
        self.spent += self.asha.cost(rung) * len(trial_ids)
        self.sampled += drawn
        self.plans += 1

    def record(self, trial_id: str, rung: int, score: float | None) -> None:
        self.results[rung].append((trial_id, score))
