"""The Ray executor's pool, which follows the cluster: actors asked for and marked ready as they
answer, lost ones (and their node's silent peers) dropped with their packs queued again, and
others asked for in their place or on nodes that join."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from typing import Any

from packexp.executors.base import CacheView, ExecutorError, PackJob
from packexp.executors.ray_cluster import death, room

# The executor's logger: the pool's lines name the executor, as before it had a module.
log = logging.getLogger("packexp.executors.ray")

# How often, while packs train, the driver looks for room a joining node brought (seconds).
POLL_S = 2.0
# How long an idle worker on the node of a lost one has to answer before it leaves the pool.
PEER_TIMEOUT_S = 10.0


class RayPool:
    """The actors of ``RayExecutor`` by worker number, as the cluster places, loses and adds
    them; the executor sets the settings and the state below (``RayExecutor.__init__``)."""

    num_workers: int | None
    gpus_per_pack: float
    cpus_per_pack: float
    shared_dir: Any
    max_restarts: int
    max_task_retries: int
    ready_timeout_s: float
    worker_cache: str
    trainer: Any
    _remote: Any
    _config: dict
    _actors: dict[int, Any]
    _views: dict[int, CacheView]
    _where: dict[int, dict]
    _refs: dict[Any, tuple[PackJob, int]]
    _starting: dict[Any, int]
    _ready: set[int]
    _queued: list[PackJob]
    _retried: Counter[str]
    _restarts: int
    _lost: list[str]
    _fit_seen: int
    _looked: float
    _next: int
    _initial: int


    def _add_worker(self) -> int:
        """Asks the cluster for one more actor; it joins the pool once it answers."""
        number, self._next = self._next, self._next + 1
        actor = self._remote.remote(self._config, str(self.shared_dir),
                                    float(self.gpus_per_pack), self.trainer, self.worker_cache)
        self._actors[number] = actor
        self._views[number] = CacheView()
        self._starting[actor.where.remote()] = number
        return number

    def _first_ready(self) -> int:
        import ray

        deadline = time.monotonic() + self.ready_timeout_s
        while not self._ready:
            if not self._starting:
                raise ExecutorError(self._none_left())
            left = deadline - time.monotonic()
            done, _ = ray.wait(list(self._starting), num_returns=1, timeout=max(0.0, left))
            if not done:
                raise ExecutorError(self._not_ready())
            self._started(done[0])
        busy = {worker for _, worker in self._refs.values()}
        return min(self._ready - busy or self._ready)  # a free one, if any: a probe while
        # packs train must not wait behind one

    def _started(self, ref: Any) -> None:
        """Marks the actor that answered ``ref`` ready. One that died as it started (its
        ``__init__`` failed, or its node was lost) leaves the pool with a warning while
        others can still train; when none can, the run stops in one line with its cause."""
        import ray

        worker = self._starting.pop(ref)
        try:
            self._where[worker] = ray.get(ref)
        except ray.exceptions.RayError as e:
            self._actors.pop(worker, None)
            self._views.pop(worker, None)
            # Ray's message ends with the exception __init__ raised.
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            reason = (lines[-1] if lines else type(e).__name__)[:200]
            if not self._ready and not self._starting:
                if self._lost:  # the last replacement of lost workers
                    self._lost.append(f"worker {worker} (died as it started: {reason})")
                    raise ExecutorError(self._none_left()) from None
                raise ExecutorError(f"executor: every worker died as it started (importing "
                                    f"TensorFlow, loading the data); worker {worker}: "
                                    f"{reason}") from None
            log.warning("executor: worker %d died as it started, the others train on: %s",
                        worker, reason)
            return
        self._ready.add(worker)
        if worker >= self._initial:  # a replacement, or a worker of a node that joined
            where = self._where[worker]
            log.warning("executor: worker %d joined on node %s (%s); %d workers train",
                        worker, where["node"][:8], where["host"], len(self._ready))

    def _lose(self, worker: int, error: BaseException, job: PackJob | None = None,
              doing: str = "", peers: bool = True) -> None:
        """``worker`` died (its process killed, its node lost): it leaves the pool, its pack
        (``job``, or the one it still had in flight) goes back to the front of the queue, and
        an actor is asked in its place. Idle workers of the same node are asked whether they
        answer, and leave the pool too if not (``peers``): a lost node's idle workers would
        otherwise each take the pack and fail it, spending its retries. Stops the run in one
        line when the pack's retries are spent."""
        import ray

        if worker not in self._actors:
            return  # already gone (its death seen through another call)
        actor = self._actors.pop(worker)
        self._views.pop(worker, None)
        self._ready.discard(worker)
        where = self._where.pop(worker, {})
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        jobs = [job] if job is not None else []
        for ref, (other, w) in list(self._refs.items()):
            if w == worker:  # its pack, while the device was measured on it
                del self._refs[ref]
                jobs.append(other)
        why = death(where, error)
        self._lost.append(f"worker {worker} ({why})")
        for lost in jobs:
            self._retried[lost.key] += 1
            if self._retried[lost.key] > self.max_task_retries:
                raise ExecutorError(
                    f"executor: pack {lost.key}'s worker died and its retries are spent "
                    f"(executor.max_task_retries={self.max_task_retries}): {why}; finished "
                    "packs are journaled: add resume=true to finish the run") from None
        self._queued[:0] = jobs
        replaced = self._replace()
        log.warning(
            "executor: worker %d lost: %s%s; %s; %d worker%s train%s on%s", worker, why,
            f" while {doing}" if doing else "",
            f"pack {', '.join(j.key for j in jobs)} is trained again by the others" if jobs
            else "the others take its work", len(self._ready), "" if len(self._ready) == 1
            else "s", "s" if len(self._ready) == 1 else "",
            ", one more is asked of the cluster" if replaced else "")
        if peers and where.get("node"):
            self._check_node(where["node"])

    def _check_node(self, node: str) -> None:
        """The idle ready workers on ``node``, asked for their pid: those that fail or stay
        silent for ``PEER_TIMEOUT_S`` leave the pool (busy ones report through their pack)."""
        import ray

        busy = {w for _, w in self._refs.values()}
        asked = {self._actors[w].pid.remote(): w for w in sorted(self._ready - busy)
                 if self._where.get(w, {}).get("node") == node}
        if not asked:
            return
        done, silent = ray.wait(list(asked), num_returns=len(asked), timeout=PEER_TIMEOUT_S)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayError as e:
                self._lose(asked[ref], e, peers=False)
        for ref in silent:
            self._lose(asked[ref], TimeoutError(f"no answer in {PEER_TIMEOUT_S:g} s"),
                       peers=False)

    def _replace(self) -> bool:
        """Asks for an actor in place of a dead one, while restarts remain and the pool is
        below its size (``num_workers``, or what the cluster has room for now)."""

        target = self.num_workers or room(self.cpus_per_pack, self.gpus_per_pack)
        if self._restarts >= self.max_restarts or len(self._actors) >= target:
            return False
        self._restarts += 1
        self._add_worker()
        return True

    def _grow(self) -> None:
        """With ``num_workers=null``, workers on nodes that joined: one more actor for each
        worker's room the cluster gained since it was last looked at."""

        if self.num_workers is not None or time.monotonic() - self._looked < POLL_S:
            return
        self._looked = time.monotonic()
        fit = room(self.cpus_per_pack, self.gpus_per_pack)
        for _ in range(min(fit - self._fit_seen, fit - len(self._actors))):
            self._add_worker()
        self._fit_seen = fit

    def _none_left(self) -> str:
        lost = "; ".join(self._lost[-3:]) or "none started"
        return (f"executor: no worker is left to train: {lost} (executor.max_restarts="
                f"{self.max_restarts}); finished packs are journaled: add resume=true to "
                "finish the run")

    def _not_ready(self) -> str:
        return (f"executor.ready_timeout_s={self.ready_timeout_s:g}: no worker was ready to "
                f"train in time ({len(self._starting)} still waiting for the cluster to place "
                "them, importing TensorFlow or loading the data); raise it for a slow cluster")
