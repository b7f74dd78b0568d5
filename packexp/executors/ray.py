"""Packs trained on a Ray cluster by long-lived actors, a pool that follows the cluster
(``ray_pool``): a lost worker's pack is trained again by the others, and a node that joins
brings workers."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from packexp.errors import ConfigError
from packexp.executors.base import (
    ATTEMPTS,
    CacheView,
    Executor,
    ExecutorError,
    PackJob,
    discard_attempts,
    drop_other_attempts,
    prune_attempts,
)
from packexp.executors.ray_cluster import (
    PLACEMENTS,
    cause,
    check_settings,
    connect,
    lost_errors,
    prepare,
    reason,
    resources,
    room,
)
from packexp.executors.ray_pool import POLL_S, RayPool
from packexp.executors.ray_worker import WORKER_CACHE, PackWorker, unpack
from packexp.executors.reaper import Reaper
from packexp.space.options import member_key

log = logging.getLogger(__name__)


class RayExecutor(RayPool, Executor):
    """Dispatches packs to free actors as they free up (``ray.wait``), on a pool that follows
    the cluster.

    The driver stays the only writer of the journal and the tracking store; actors return
    plain dicts and write checkpoints under ``shared_dir``. The driver trains nothing and
    leaves the GPU to the actors: the device's limit, memory probes and a cost calibration
    run on a ready actor (``on_device``). Each actor reports what its cache keeps; planning
    sees them merged, and a pack goes to the free actor that could set up most of it
    without building.

    Ray restarts nothing: an actor that dies (its process killed, its node lost) leaves the
    pool, its pack goes back to the front of the queue for the others, from the same
    starting states, and a replacement is asked of the cluster, which places it where there
    is room, now or when a node joins. A pack never waits on an actor that cannot come back.

    Args:
        cfg: The run's config.
        run_dir: The run directory (``shared_dir``'s default).
        address: None starts a local cluster; ``auto`` or ``host:port`` joins one.
        num_workers: Actors; None for the cluster's GPUs / ``gpus_per_pack``, or its CPUs /
            ``cpus_per_pack`` without GPUs per pack, followed as nodes join and leave.
        gpus_per_pack: Each actor's share of a GPU (1, 0.5, 0.25), or 0 for CPU actors.
        cpus_per_pack: CPUs reserved for each actor.
        placement: PACK fills a node before the next (Ray's default scheduling); SPREAD
            spreads the actors over nodes.
        shared_dir: The checkpoint directory, the same path on every node; None for
            ``run_dir``.
        max_restarts: Actors started in place of ones that died, over the run.
        max_task_retries: Times one pack whose actor died is trained again.
        ready_timeout_s: How long, while packs wait with none in flight, to wait for an
            actor to be ready (placed, TensorFlow imported, the data loaded).
        trainer: What trains the packs on each actor (``executors.Trainer``, pickled to
            them); TensorFlow's when None.
        worker_cache: The dotted name of the function that builds an actor's cache from the
            run's config.
    """

    trains_here = False

    def __init__(self, cfg: Any = None, run_dir: str | Path | None = None, *,
                 address: str | None = None, num_workers: int | None = None,
                 gpus_per_pack: float = 0, cpus_per_pack: float = 1,
                 placement: str = "PACK", shared_dir: str | None = None,
                 max_restarts: int = 3, max_task_retries: int = 3,
                 ready_timeout_s: float = 120, trainer: Any = None,
                 worker_cache: str = WORKER_CACHE) -> None:
        super().__init__(cfg, run_dir, trainer)
        if not self.trainer.measures_device:  # an actor's cache and device facts are measured
            raise ConfigError(f"executor=ray: its actors train with TensorFlow's trainer; the "
                              f"{self.trainer.name} trainer runs under executor=local")
        prepare(address)
        check_settings(num_workers=num_workers, gpus_per_pack=gpus_per_pack,
                       placement=placement, max_restarts=max_restarts,
                       max_task_retries=max_task_retries)
        self.address = address
        self.num_workers = num_workers
        self.gpus_per_pack = gpus_per_pack
        self.cpus_per_pack = cpus_per_pack
        self.placement = placement
        base = Path(shared_dir) if shared_dir else self.run_dir or Path.cwd()
        self.shared_dir = base.resolve()
        self.max_restarts = max_restarts
        self.max_task_retries = max_task_retries
        self.ready_timeout_s = ready_timeout_s
        self.worker_cache = worker_cache
        self._owns_ray = False
        self._reaper: Reaper | None = None
        self._remote: Any = None  # the actor class with its options
        self._config: dict = {}
        self._actors: dict[int, Any] = {}  # the pool, by worker number (never reused)
        self._views: dict[int, CacheView] = {}  # what each actor's cache kept when it answered
        self._where: dict[int, dict] = {}  # each ready actor's node, host and pid
        self._refs: dict[Any, tuple[PackJob, int]] = {}  # in flight: its job and actor
        self._starting: dict[Any, int] = {}  # actors not yet ready: the answer they owe
        self._ready: set[int] = set()  # actors that have answered (their __init__ ran)
        self._queued: list[PackJob] = []  # submitted, waiting for a ready actor to be free
        self._journaled: set[str] = set()  # checkpoints a resumed run's journal names
        self._retried: Counter[str] = Counter()  # packs trained again after a death
        self._restarts = 0  # actors started in place of dead ones
        self._lost: list[str] = []  # what was lost, for the line that ends a run
        self._fit_seen = 0  # workers the cluster had room for when last looked
        self._looked = 0.0  # when the driver last looked (time.monotonic())
        self._next = 0
        self._initial = 0  # workers asked for at the start

    def start(self, cache: Any) -> RayExecutor:
        super().start(cache)
        try:
            self._start()
        except BaseException:
            self.close()  # a cluster this run started goes with it
            raise
        return self

    def _start(self) -> None:
        import ray

        self._connect()
        self._fit_seen = fit = room(self.cpus_per_pack, self.gpus_per_pack)
        if fit < 1 and self.num_workers is None:
            unit = "GPU" if self.gpus_per_pack else "CPU"
            raise ConfigError(
                f"executor.num_workers=null: the cluster has no {unit} for one worker "
                f"({resources()}); set executor.gpus_per_pack or executor.cpus_per_pack")
        n = self.num_workers or fit
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        # Workers import this checkout's packexp, whatever the nodes installed.
        env = {"PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}
        if self.address is None:
            # On a cluster of this run's own, workers train at the driver's priority: Ray
            # lowers a worker's by 15 (nice), which starves the training behind any other
            # work on the machine. A cluster someone started keeps its own policy.
            env["RAY_worker_niceness"] = "0"
        # No restarts by Ray, and no placement group: Ray would restart a lost node's actor
        # into that node's bundle, which waits for room that may never come, and retry its
        # pack there, so the rung would wait forever. The driver replaces it instead.
        self._remote = ray.remote(PackWorker).options(
            num_cpus=self.cpus_per_pack, num_gpus=self.gpus_per_pack, max_restarts=0,
            max_task_retries=0, runtime_env={"env_vars": env},
            scheduling_strategy=PLACEMENTS[self.placement])
        self._config = OmegaConf.to_container(self.cfg, resolve=True)
        self._initial = n
        for _ in range(n):
            self._add_worker()
        if n > fit:
            log.warning("executor.num_workers=%d: the cluster (%s) has room for %d now; the "
                        "others start when room frees or a node joins", n, resources(), fit)
        log.info("ray: %d workers (%s each, %s) at %s", n, self._bundle(), self.placement,
                 ray.get_runtime_context().gcs_address)

    def _bundle(self) -> dict[str, float]:
        bundle = {"CPU": self.cpus_per_pack}
        if self.gpus_per_pack:
            bundle["GPU"] = self.gpus_per_pack
        return bundle

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return  # a session the caller opened (tests share one)
        self._reaper = connect(self.address)
        self._owns_ray = True

    def place(self) -> dict[str, Any]:
        return {"executor": "ray", "cpus_per_pack": self.cpus_per_pack,
                "gpus_per_pack": self.gpus_per_pack, "workers": self._initial}

    def on_device(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(cache, *args)`` on the first ready actor (waiting for one to start); if it
        dies, on the next."""
        import ray

        while True:
            worker = self._first_ready()
            try:
                result, self._views[worker] = ray.get(
                    self._actors[worker].on_device.remote(fn, *args))
                return result
            except ray.exceptions.RayTaskError as e:
                raise cause(e) from None
            except lost_errors() as e:
                self._lose(worker, e, doing="measuring the device")
            except ray.exceptions.RayError as e:
                raise ExecutorError(f"executor: measuring the device: Ray failed: "
                                    f"{reason(e)}") from None

    def view(self) -> CacheView:
        return CacheView.merged(self._views.values())

    @property
    def workers(self) -> int:
        return len(self._actors)

    def _dispatch(self, job: PackJob) -> None:
        """Queues ``job`` for the first ready actor that is free: at once if there is one.
        An actor still starting takes nothing: a pack queued behind it would wait while the
        ready ones trained the rest of the rung (docs/scale-out.md)."""
        self._queued.append(job)
        self._send_queued()

    def _send_queued(self) -> None:
        """Sends queued jobs, oldest first, each to the free ready actor whose cache could
        set up most of it."""
        import ray

        if self._starting:
            done, _ = ray.wait(list(self._starting), num_returns=len(self._starting),
                               timeout=0)
            for ref in done:
                self._started(ref)
        while self._queued:
            busy = {worker for _, worker in self._refs.values()}
            free = [w for w in sorted(self._ready) if w not in busy]
            if not free:
                return
            job = self._queued.pop(0)
            worker = self._closest(job, free)
            self._refs[self._actors[worker].run_pack.remote(job)] = (job, worker)

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        import ray

        idle_since: float | None = None
        while True:
            self._grow()  # at most every POLL_S: a node may have joined
            self._send_queued()
            waiting = [*self._refs, *self._starting]
            if not waiting:
                raise ExecutorError(self._none_left())
            # With no pack in flight, only actors still starting can take the queued ones.
            if self._refs:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            ready, _ = ray.wait(waiting, num_returns=1, timeout=POLL_S)
            if not ready:
                if idle_since is not None and \
                        time.monotonic() - idle_since > self.ready_timeout_s:
                    raise ExecutorError(self._not_ready())
                continue
            [ref] = ready
            if ref in self._starting:
                self._started(ref)
                continue
            job, worker = self._refs.pop(ref)
            try:
                (runs, worked), view = ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                raise cause(e) from None
            except lost_errors() as e:
                self._lose(worker, e, job)
                continue
            except ray.exceptions.RayError as e:
                raise ExecutorError(f"executor: pack {job.key}: Ray failed: "
                                    f"{reason(e)}") from None
            if worker in self._actors:  # not a worker lost while this came back
                self._views[worker] = view
            received = time.perf_counter()
            drop_other_attempts(self.shared_dir / ATTEMPTS, job.key,
                                {r["attempt"] for r in runs}, self._journaled)
            # The actor just freed takes the oldest queued pack. (A worker that died as it
            # started cannot stop the run here: this one is ready, so it only warns.)
            self._send_queued()
            where = {"worker": worker, **self._where.get(worker, {})}
            return job, [unpack(r, job, received, where) for r in runs], worked

    def cancel(self) -> None:
        import ray

        for ref in self._refs:
            ray.cancel(ref)  # actor tasks: the actors themselves go in ``close``
        self._refs.clear()
        self._queued.clear()
        super().cancel()

    def _closest(self, job: PackJob, free: list[int]) -> int:
        """The free actor whose cache could set up most of ``job`` without building (the
        lowest-numbered among equals)."""
        sliced = self.cache.pack_options.get("data_sharing") == "slice"
        key = self.cache.key(job.group, job.fusion)
        members = [member_key(t, sliced) for t in job.group]
        return max(sorted(free), key=lambda w: self._views[w].affinity(key, members))

    def discard(self, keep: set[str]) -> None:
        self._journaled = set(keep)
        discard_attempts(self.shared_dir / ATTEMPTS, keep)

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for actor in self._actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._actors = {}
        self._views = {}
        self._starting = {}
        self._ready = set()
        self._queued = []
        with contextlib.suppress(OSError):  # a killed actor may still be writing its files
            prune_attempts(self.shared_dir / ATTEMPTS)
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None
