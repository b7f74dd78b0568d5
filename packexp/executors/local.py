"""Packs trained one after another in this process: the default."""

from __future__ import annotations

import time

from packexp.executors.base import Executor, PackJob


class LocalExecutor(Executor):
    """Trains each pack in turn with the driver's own ``PackCache`` and the executor's trainer:
    one worker, which trains a submitted pack when the driver waits for it."""

    def _dispatch(self, job: PackJob) -> None:
        pass

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        job = next(iter(self._running.values()))
        started = time.time()
        trainer = self.trainer
        states = {i: trainer.read_state(s) if isinstance(s, str) else s
                  for i, s in job.states.items()}
        runs = trainer.train_group(job.group, self.cache, job.epochs, states, fusion=job.fusion,
                                   lr_horizon=job.lr_horizon)
        return job, runs, (started, time.time())
