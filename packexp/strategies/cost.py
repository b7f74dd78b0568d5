"""Measured packing: the partition of a rung's trials with the least predicted time.

The paper's Section 5.2 poses packing as finding, among all packable partitions of a rung's
trials, the one that trains fastest, and settles for the kNN heuristic for want of a cost
model. Here a cost model fitted to the device's measurements (``Measurement``) predicts each
candidate pack's duration, and the plan is the cheapest partition found:

1. the singletons (always a valid plan);
2. a dynamic programme over the trials sorted by batch size and steps, each contiguous run
   of up to ``max_members`` trials one pack;
3. greedy merging from the cheaper of those two: the merge of two packs that saves the most
   predicted time, until no merge saves any;
4. local search from there: moving or swapping trials between packs while that lowers the
   plan's prediction (rungs of up to ``SWAP_LIMIT`` trials), which finds plans whose packs
   share a structure, so that later packs reuse what the first one set up.

The cheapest of the three by the whole plan's prediction wins. Each pack also gets its
fusion setting (``fusion_modes``): fused (members padded to the largest batch) or plain
(each member at its own batch size); whichever the model predicts faster. ``slice`` and
``switch`` are never chosen: slicing makes a member's data depend on its pack-mates.

A pack's predicted duration is its set-up (members built or loaded, programs traced unless
a kept pack of its structure is reused), its training, evaluation and checkpoints. The plan
is simulated in order, so a pack whose structure an earlier pack set up is predicted to
reuse it, as ``PackCache`` does.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packexp.space import Trial
from packexp.space.options import (
    member_key,
    pack_key,
)
from packexp.strategies.base import Capacity, Device, Planned, RungContext, Strategy
from packexp.strategies.calibration import (
    FALLBACK,
    LIMIT_S,
    calibration_for,
)
from packexp.strategies.cost_model import CostModel, fitted
from packexp.strategies.knn import KnnStrategy

log = logging.getLogger(__name__)

LOOPED = "looped"  # a looped program's key: this, then its member structure
SWAP_LIMIT = 48  # local search's moves grow with the square of the rung's trials
# pack() without a rung context plans as if every trial trains this many steps.
DEFAULT_STEPS = 100


def fallback_line(why: str, path: Any, measured: bool) -> str:
    """What a cost strategy that plans as ``FALLBACK`` says, once per run."""
    return (f"strategy=cost plans as strategy={FALLBACK} here (by distance, not measured "
            f"costs): its calibration does not fit in {LIMIT_S:g} s on this device ({why}); "
            + ("kept with the calibrations" if measured else f"read from {path}")
            + ", so later runs of this model and data shape plan so at once; "
            "strategy.recalibrate=true tries again")


class CostStrategy(Strategy):
    """Packs a rung as the cost model predicts fastest; singletons where packing loses. It
    weighs costs (``WeighsCosts``): ``prepare`` fits its model to the device's calibration.

    Args:
        seed: Unused (the plan is deterministic in the trials and the calibration); kept
            for the strategy interface.
        calibration_dir: Where calibrations are kept across runs, one file per device and
            structure (a relative path: to the directory the command runs in); None keeps
            none. The config's default is packexp's home, ``$PACKEXP_HOME/calibration``
            (``conf/strategy/cost.yaml``), for every directory alike.
        recalibrate: Measure afresh even where a kept calibration matches.
        calibration: A calibration file to plan with, whatever device measured it (a copy
            of a run's ``calibration.json``, to pin a plan); null: the above.
    """

    def __init__(self, seed: int = 0, calibration_dir: str | None = None,
                 recalibrate: bool = False, calibration: str | None = None) -> None:
        super().__init__(seed)
        self.calibration_dir = calibration_dir
        self.recalibrate = bool(recalibrate)
        self.calibration = calibration
        self.used: Any = None  # the Calibration planned with, once prepared
        self.fallback: Strategy | None = None  # what plans where no calibration fitted
        self.costs: CostModel | None = None
        self.chosen: dict[str, int] = {}  # which candidate won, per plan (for the record)
        self._memo: dict[tuple, tuple] = {}

    def use_costs(self, costs: CostModel | Mapping[str, Any]) -> None:
        """Plans with ``costs`` (a fitted model, or a calibration record to fit)."""
        self._memo.clear()  # what it holds came from the model before
        self.costs = costs if isinstance(costs, CostModel) else CostModel.fit(costs)

    def prepare(self, device: Device) -> None:
        """Fits the cost model to the device's calibration: the run's own, the file
        ``calibration`` names, one kept under ``calibration_dir`` for the same facts, or one
        measured there now."""
        used = calibration_for(device, self.calibration, self.calibration_dir,
                               self.recalibrate, check=fitted)
        self.used = used
        if used.record.get("fallback"):
            self.fallback, self.costs = KnnStrategy(seed=self.seed), None
            log.warning(fallback_line(used.record["why"], used.path, used.measured))
            return
        self.fallback = None
        self.use_costs(used.checked or used.record)  # a record read back is fitted once
        error = self.costs.error
        log.info("cost model: calibration %s (digest %s), %s; step times fitted within %.0f%% "
                 "(median), %.0f%% (max) over %d packs", used.record["key"],
                 used.summary()["digest"],
                 f"measured in {used.record['seconds']:.1f} s" if used.measured
                 else f"read from {used.path}", 100 * error["median"], 100 * error["max"],
                 error["packs"])

    def calibration_used(self) -> dict[str, str] | None:
        return None if self.used is None else self.used.summary()

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        rung = RungContext(steps={t.trial_id: DEFAULT_STEPS for t in trials})
        return [group for group, _ in self.plan(trials, capacity, rung)]

    def plan(self, trials: Sequence[Trial], capacity: Capacity, rung: RungContext) -> list[Planned]:
        if self.fallback is not None:
            return self.fallback.plan(trials, capacity, rung)
        if self.costs is None:
            raise RuntimeError("strategy=cost has no cost model: call use_costs first")
        if not trials:
            return []
        self._memo.clear()
        singles = [[t] for t in trials]
        candidates = {"singletons": singles, "sorted": self._sorted_runs(trials, capacity, rung)}
        start = min(candidates, key=lambda k: self.plan_cost(candidates[k], rung)[0])
        candidates["merged"] = self._merge(candidates[start], capacity, rung)
        candidates["swapped"] = self._swap(candidates["merged"], capacity, rung)
        name = min(candidates, key=lambda k: self.plan_cost(candidates[k], rung)[0])
        self.chosen[name] = self.chosen.get(name, 0) + 1
        total, modes = self.plan_cost(candidates[name], rung)
        log.debug("cost plan: %s, %d packs, %.2f s predicted", name, len(modes), total)
        return list(zip(candidates[name], modes, strict=True))

    def predict(self, trials: Sequence[Trial], fusion: str | None,
                rung: RungContext) -> float | None:
        if self.costs is None:
            return None
        fusion = fusion or self.costs.modes(trials)[0]
        self._memo.clear()
        return self._cost(list(trials), fusion, rung, rung.kept, rung.members, amortize=False)

    def plan_cost(self, groups: Sequence[Sequence[Trial]],
                  rung: RungContext) -> tuple[float, list[str]]:
        """The plan's predicted time, packs run in order, and each pack's fusion setting."""
        kept, built = set(rung.kept), dict(rung.members)
        total, modes = 0.0, []
        for group in groups:
            cost, mode = min((self._cost(group, m, rung, kept, built), m)
                             for m in self._modes(group))
            total += cost
            modes.append(mode)
            kept.add(self._parts(group, mode, rung)[0])
            for key, count in self._parts(group, mode, rung)[3].items():
                built[key] = max(built.get(key, 0), count)
        return total, modes

    def _parts(self, group: Sequence[Trial], fusion: str, rung: RungContext) -> tuple:
        """A pack's key, its cost once set up, its tracing cost and its member structures."""
        memo_key = (id(rung), fusion, *(t.trial_id for t in group))
        parts = self._memo.get(memo_key)
        if parts is None:
            structures: dict[tuple, int] = {}
            for t in group:
                key = member_key(t, self.costs.sliced, rung.model_runtime)
                structures[key] = structures.get(key, 0) + 1
            batches = [t.batch_size for t in group]
            steps = [rung.steps[t.trial_id] for t in group]
            ready = self.costs.duration_s(batches, steps, fusion, new=False, builds=0,
                                          checkpoint=rung.checkpoint)
            setup = self.costs.duration_s(batches, steps, fusion, new=True, builds=0,
                                          checkpoint=rung.checkpoint) - ready
            key = pack_key(group, self.costs.sliced, fusion, rung.model_runtime, rung.bucketed)
            if fusion == "off" and self.costs.looped and len(structures) == 1:
                key = (LOOPED, *structures)  # one program for every plain pack of it
            parts = (key, ready, setup, structures)
            self._memo[memo_key] = parts
        return parts

    def _cost(self, group: Sequence[Trial], fusion: str, rung: RungContext,
              kept: set[tuple] | frozenset[tuple] | Mapping[tuple, int],
              built: Mapping[tuple, int], amortize: bool = True) -> float:
        """A pack's predicted duration after the packs that set up ``kept`` and ``built``.

        With ``amortize``, a single's set-up counts shared with the later singles of its
        structure the search is expected to run (the rest of the search's trials over the
        space's member structures): the kept single serves them all. A space of endless
        structures amortises nothing.
        """
        key, ready, setup, structures = self._parts(group, fusion, rung)
        confirm = sum(k not in rung.replayed for k in structures) * self.costs.build_s
        if key in kept and (not isinstance(kept, Mapping) or kept[key] > 0):
            return ready + confirm
        if key[0] == LOOPED and built.get(key[1], 0) > 0:
            # Members of the structure trained before: its looped program is traced.
            setup = 0.0
        builds = sum(max(0, c - built.get(k, 0)) for k, c in structures.items())
        if amortize and len(group) == 1:
            setup /= 1 + rung.future_trials / max(rung.structures, 1)
        return (ready + setup + builds * (self.costs.build_s - self.costs.load_s)
                + (confirm if builds < len(group) else 0.0))

    def _best(self, group: Sequence[Trial], rung: RungContext,
              kept: set[tuple] | frozenset[tuple] | Mapping[tuple, int]) -> float:
        return min(self._cost(group, m, rung, kept, rung.members) for m in self._modes(group))

    def _modes(self, group: Sequence[Trial]) -> tuple[str, ...]:
        key = ("modes", *(t.trial_id for t in group))  # once per group: _swap asks again
        return self._memo.get(key) or self._memo.setdefault(key, self.costs.modes(group))

    def _sorted_runs(self, trials: Sequence[Trial], capacity: Capacity,
                     rung: RungContext) -> list[list[Trial]]:
        """The cheapest split of the trials, sorted by batch size and steps, into runs."""
        order = sorted(trials, key=lambda t: (t.batch_size, rung.steps[t.trial_id],
                                              member_key(t, False, rung.model_runtime),
                                              t.trial_id))
        cap = capacity.max_members or len(order)
        best = [0.0] + [np.inf] * len(order)
        cut = [0] * (len(order) + 1)
        for end in range(1, len(order) + 1):
            for start in range(max(0, end - cap), end):
                group = order[start:end]
                if len(group) > 1 and not capacity.fits(group):
                    continue
                cost = best[start] + self._best(group, rung, rung.kept)
                if cost < best[end]:
                    best[end], cut[end] = cost, start
        runs, end = [], len(order)
        while end:
            runs.append(order[cut[end]:end])
            end = cut[end]
        return runs[::-1]

    def _merge(self, groups: list[list[Trial]], capacity: Capacity,
               rung: RungContext) -> list[list[Trial]]:
        """Greedy merging: the two packs whose merge saves the most, while one saves time.

        Each candidate merge is scored by its packs' own costs, with the structures the
        plan's other packs set up counted as kept; the best few are then checked against
        the whole plan's prediction.
        """
        groups = [list(g) for g in groups]
        cost, modes = self.plan_cost(groups, rung)
        while len(groups) > 1:
            keys = [self._parts(g, m, rung)[0] for g, m in zip(groups, modes, strict=True)]
            counts: dict[tuple, int] = {k: 1 for k in rung.kept}
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
            alone = []
            for g, k in zip(groups, keys, strict=True):
                counts[k] -= 1
                alone.append(self._best(g, rung, counts))
                counts[k] += 1
            scored = []
            for i in range(len(groups)):
                for j in range(i + 1, len(groups)):
                    merged = groups[i] + groups[j]
                    if not capacity.fits(merged):
                        continue
                    counts[keys[i]] -= 1
                    counts[keys[j]] -= 1
                    saving = alone[i] + alone[j] - self._best(merged, rung, counts)
                    counts[keys[i]] += 1
                    counts[keys[j]] += 1
                    scored.append((-saving, i, j))
            for _, i, j in sorted(scored)[:5]:
                candidate = [g for m, g in enumerate(groups) if m not in (i, j)]
                candidate.insert(i, groups[i] + groups[j])
                candidate_cost, candidate_modes = self.plan_cost(candidate, rung)
                if candidate_cost < cost - 1e-9:
                    groups, cost, modes = candidate, candidate_cost, candidate_modes
                    break
            else:
                return groups
        return groups

    def _swap(self, groups: list[list[Trial]], capacity: Capacity,
              rung: RungContext) -> list[list[Trial]]:
        """Moves and swaps of single trials between packs, while the plan gets cheaper."""
        groups = [list(g) for g in groups]
        if sum(map(len, groups)) > SWAP_LIMIT or all(len(g) == 1 for g in groups):
            return groups  # from singletons, a move is a merge, which _merge has tried
        cost, _ = self.plan_cost(groups, rung)
        improved = True
        while improved:
            improved = False
            for a, b in itertools.permutations(range(len(groups)), 2):
                for i in range(len(groups[a])):
                    # A move (j is None) or a swap with trial j of pack b.
                    for j in [None, *range(len(groups[b]))]:
                        candidate = [list(g) for g in groups]
                        moved = candidate[a].pop(i)
                        if j is None:
                            candidate[b].append(moved)
                        else:
                            candidate[a].insert(i, candidate[b][j])
                            candidate[b][j] = moved
                        if not all(len(g) == 1 or capacity.fits(g) for g in candidate if g):
                            continue
                        candidate = [g for g in candidate if g]
                        candidate_cost, _ = self.plan_cost(candidate, rung)
                        if candidate_cost < cost - 1e-9:
                            groups, cost, improved = candidate, candidate_cost, True
                            break
                    if improved:
                        break
                if improved:
                    break
        return groups
