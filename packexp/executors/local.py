"""Packs trained one after another in this process: the default."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from packexp.executors.base import Executor, PackJob


class LocalExecutor(Executor):
    """Trains each pack in turn with the driver's own ``PackCache``."""

    def run(self, jobs: Sequence[PackJob],
            on_start: Callable[[int], None] = lambda k: None) -> Iterator[tuple[int, list]]:
        from packexp.packing.member import read_state
        from packexp.packing.trainer import train_group

        for k, job in enumerate(jobs):
            on_start(k)
            states = {i: read_state(s) if isinstance(s, str) else s
                      for i, s in job.states.items()}
            yield k, train_group(job.group, self.cache, job.epochs, states,
                                 fusion=job.fusion, lr_horizon=job.lr_horizon)
