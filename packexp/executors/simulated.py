"""A cluster simulated on the search's real driver: N simulated workers on a simulated clock,
each pack scored by the executor's trainer at once and timed by a cost model, so a search of
thousands of trials reads as a real run's in seconds (as Syne Tune's simulator backend)."""

from __future__ import annotations

import copy
import heapq
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packexp.errors import ConfigError, positive_int
from packexp.executors.base import Executor, PackJob, Trainer
from packexp.executors.durations import CostOfPacks, PackShape, Predicted, cost_of

HOST = "simulated"  # where a simulated pack trained, for the timeline's lanes
NODE = "clock"


class SimulatedExecutor(Executor):
    """Trains each pack as it is sent, with its trainer (the fake's synthetic scores, in
    ``conf/executor/simulated.yaml``), and puts it on the simulated worker free the longest:
    it starts at the simulated now and ends its predicted duration later. Collecting a pack
    advances the clock to the earliest end in flight. The search's times (``wall_time_s``,
    each pack's ``started_s`` and ``duration_s``, the anytime curve, ``usage()``) are on this
    clock: predictions of the cost model, never measurements.

    Args:
        cfg: The run's config.
        run_dir: The run directory.
        num_workers: Simulated workers, one pack at a time each.
        durations: The cost model as a table (``durations.StepTable``): ``step_s``, a pack
            step's seconds by its member count; ``setup_s`` per pack; ``switch_s`` per rebuild
            as members leave; ``eval_s`` per member evaluated.
        calibration: A calibration file (``strategy=cost``'s ``calibration.json``): its
            fitted cost model gives the durations instead of ``durations``.
        trainer: What scores the packs; TensorFlow's when None (which really trains them).
    """

    simulated = True

    def __init__(self, cfg: Any = None, run_dir: str | Path | None = None, *,
                 num_workers: int = 8, durations: Mapping[str, Any] | None = None,
                 calibration: str | None = None, trainer: Trainer | None = None) -> None:
        self.num_workers = positive_int("executor.num_workers", num_workers, error=ConfigError)
        self.cost: CostOfPacks = cost_of(durations, calibration)
        super().__init__(cfg, run_dir, trainer)
        self.now = 0.0  # the simulated clock, in seconds
        self._idle = [(0.0, w) for w in range(self.num_workers)]  # heap: (free since, worker)
        self._ends: list[tuple[float, int, int]] = []  # heap: (end, order sent, job's id)
        self._sent: dict[int, tuple[PackJob, list, tuple[float, float], int]] = {}
        self._set_up: dict[int, set[tuple]] = {w: set() for w in range(self.num_workers)}
        self._order = 0

    @property
    def workers(self) -> int:
        return self.num_workers

    def clock(self) -> float:
        return self.now

    def place(self) -> dict[str, Any]:
        return {"executor": "simulated", "workers": self.num_workers}

    def settings(self) -> dict[str, Any]:
        """What ``results.json``'s ``simulation`` says: the workers and the cost model."""
        return {"workers": self.num_workers, **self.cost.describe()}

    def _dispatch(self, job: PackJob) -> None:
        trainer = self.trainer
        states = {i: trainer.read_state(s) if isinstance(s, str) else s
                  for i, s in job.states.items()}
        runs = trainer.train_group(job.group, self.cache, job.epochs, states, fusion=job.fusion,
                                   lr_horizon=job.lr_horizon)
        _, worker = heapq.heappop(self._idle)  # the one free the longest, the lowest among equals
        end = self.now
        for run in runs:  # a pack split out of memory: its parts one after another
            end = placed(run, self.cost.predict(shape_of(run, job, states), self._set_up[worker]),
                         end, worker)
        heapq.heappush(self._ends, (end, self._order, id(job)))
        self._order += 1
        self._sent[id(job)] = job, runs, (self.now, end), worker

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        end, _, key = heapq.heappop(self._ends)
        job, runs, worked, worker = self._sent.pop(key)
        self.now = max(self.now, end)
        heapq.heappush(self._idle, (end, worker))
        return job, runs, worked

    def cancel(self) -> None:
        for _, _, key in self._ends:  # given up: their workers are free now
            heapq.heappush(self._idle, (self.now, self._sent.pop(key)[3]))
        self._ends.clear()
        super().cancel()


def shape_of(run: Any, job: PackJob, states: Mapping[str, Any]) -> PackShape:
    """A trained pack run as its cost model sees it: each member's steps this pack (its step
    counter now, less the one it started from)."""
    trials = {t.trial_id: t for t in job.group}
    members = run.members
    return PackShape(
        group=[trials[m.trial_id] for m in members],
        batches=[int(trials[m.trial_id].hparams.get("batch_size", 1)) for m in members],
        steps=[max(0, m.step - getattr(states.get(m.trial_id), "step", 0)) for m in members],
        fusion=job.fusion, builds=sum(states.get(m.trial_id) is None for m in members),
        checkpoint=job.checkpoint)


def placed(run: Any, predicted: Predicted, start: float, worker: int) -> float:
    """Puts ``run`` on ``worker``'s lane from ``start`` for its predicted time, by phase, as a
    pack that really trained would record it; returns its end."""
    end = start + predicted.total_s
    run.started, run.ended = start, end
    run.worker, run.host, run.node = worker, HOST, NODE
    run.build_s, run.eval_s = predicted.setup_s, predicted.eval_s
    stats = copy.copy(run.stats)
    stats.steps, stats.train_s, stats.trace_s, stats.read_s = (predicted.steps,
                                                               predicted.train_s, 0.0, 0.0)
    stats.switches, stats.switch_overhead_s = predicted.switches, predicted.switch_s
    step_ms = 1000 * predicted.train_s / predicted.steps if predicted.steps else None
    if isinstance(getattr(type(stats), "step_time_ms", None), property):
        stats.chunk_step_ms = [step_ms] if step_ms else []  # PackStats: the chunks' median
    else:
        stats.step_time_ms = step_ms
    run.stats = stats
    return end
