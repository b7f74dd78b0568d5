"""Packs trained on a Ray cluster by long-lived actors, one per placement-group bundle."""

from __future__ import annotations

import logging
import os
import time
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
    prune_attempts,
)
from packexp.executors.ray_worker import WORKER_CACHE, PackWorker, unpack
from packexp.executors.reaper import Reaper, cluster_pids
from packexp.space.options import member_key

log = logging.getLogger(__name__)

INSTALL = "pip install -e '.[ray]'"


class RayExecutor(Executor):
    """Dispatches packs to free actors as they free up (``ray.wait``).

    The driver stays the only writer of the journal and the tracking store; actors return
    plain dicts and write checkpoints under ``shared_dir``. The driver trains nothing and
    leaves the GPU to the actors: the device's limit, memory probes and a cost calibration
    run on the first actor (``on_device``). Each actor reports what its cache keeps; planning
    sees them merged, and a pack goes to the free actor that could set up most of it
    without building.

    Args:
        cfg: The run's config.
        run_dir: The run directory (``shared_dir``'s default).
        address: None starts a local cluster; ``auto`` or ``host:port`` joins one.
        num_workers: Actors; None for the cluster's GPUs / ``gpus_per_pack``, or its CPUs /
            ``cpus_per_pack`` without GPUs per pack.
        gpus_per_pack: Each actor's share of a GPU (1, 0.5, 0.25), or 0 for CPU actors.
        cpus_per_pack: CPUs reserved for each actor.
        placement: The placement group's strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD).
        shared_dir: The checkpoint directory, the same path on every node; None for
            ``run_dir``.
        max_restarts: Times a dead actor is restarted.
        max_task_retries: Times a pack whose actor died is retried.
        ready_timeout_s: How long to wait for the cluster to grant the actors' resources,
            and, while packs wait with none in flight, for an actor to be ready
            (TensorFlow imported, the data loaded).
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
        if not self.trainer.measures_device:
            raise ConfigError(f"executor=ray: its actors train with TensorFlow's trainer; the "
                              f"{self.trainer.name} trainer runs under executor=local")
        if address is None or address.rpartition(":")[0] in ("127.0.0.1", "localhost"):
            # Loopback: Ray reads this flag at import; it makes the node's address 127.0.0.1
            # rather than the machine's.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        if address is None:
            # A cluster of this run alone, on loopback: nothing else can reach it, so it
            # needs no token, which Ray would otherwise write under ~/.ray.
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError(f"executor=ray: Ray is not installed; {INSTALL}") from None
        if gpus_per_pack not in (0, 0.25, 0.5) and not (
                gpus_per_pack >= 1 and float(gpus_per_pack).is_integer()):
            raise ConfigError(f"executor.gpus_per_pack={gpus_per_pack}: must be 0 (CPU), "
                              "0.25, 0.5 or a whole number of GPUs")
        if num_workers is not None and num_workers < 1:
            raise ConfigError(f"executor.num_workers={num_workers}: must be at least 1")
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
        self._group = None
        self._actors: list[Any] = []
        self._views: list[CacheView] = []  # what each actor's cache kept when it last answered
        self._refs: dict[Any, tuple[PackJob, int]] = {}  # in flight: its job and actor
        self._starting: dict[Any, int] = {}  # actors not yet ready: the answer they owe
        self._ready: set[int] = set()  # actors that have answered (their __init__ ran)
        self._queued: list[PackJob] = []  # submitted, waiting for a ready actor to be free
        self._journaled: set[str] = set()  # checkpoints a resumed run's journal names

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
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._connect()
        n = self.num_workers or self._workers_fitting(ray.cluster_resources())
        bundle = {"CPU": self.cpus_per_pack}
        if self.gpus_per_pack:
            bundle["GPU"] = self.gpus_per_pack
        self._group = placement_group([dict(bundle)] * n, strategy=self.placement)
        ready, _ = ray.wait([self._group.ready()], timeout=self.ready_timeout_s)
        if not ready:
            raise ConfigError(
                f"executor.num_workers={n}: the cluster ({_resources()}) cannot place {n} "
                f"bundles of {bundle} ({self.placement}) within {self.ready_timeout_s:.0f} s")
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        worker = ray.remote(PackWorker)
        # Workers import this checkout's packexp, whatever the nodes installed.
        env = {"PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}
        if self.address is None:
            # On a cluster of this run's own, workers train at the driver's priority: Ray
            # lowers a worker's by 15 (nice), which starves the training behind any other
            # work on the machine. A cluster someone started keeps its own policy.
            env["RAY_worker_niceness"] = "0"
        options = {"num_cpus": self.cpus_per_pack, "num_gpus": self.gpus_per_pack,
                   "max_restarts": self.max_restarts, "max_task_retries": self.max_task_retries,
                   "runtime_env": {"env_vars": env}}
        config = OmegaConf.to_container(self.cfg, resolve=True)
        self._actors = [
            worker.options(**options, scheduling_strategy=PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=i)).remote(
                    config, str(self.shared_dir), float(self.gpus_per_pack), self.trainer,
                    self.worker_cache)
            for i in range(n)]
        self._views = [CacheView() for _ in self._actors]
        self._starting = {actor.pid.remote(): i for i, actor in enumerate(self._actors)}
        self._ready = set()
        log.info("ray: %d workers (%s each, %s) at %s", n, bundle, self.placement,
                 ray.get_runtime_context().gcs_address)

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return  # a session the caller opened (tests share one)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        if self.address is None:
            kwargs["_node_ip_address"] = "127.0.0.1"
        _check_reachable(self.address)
        # A cluster this process starts is ended with it, however it ends (reaper.py).
        reaper = Reaper() if self.address is None else None
        try:
            ray.init(address=self.address, **kwargs)
        except Exception as e:  # ConnectionError, RuntimeError, ValueError, auth errors
            if reaper is not None:
                reaper.watch(cluster_pids())
                reaper.close()
            reason = " ".join(str(e).split())[:200]
            raise ConfigError(f"executor.address={self.address}: cannot join a Ray cluster "
                              f"there ({type(e).__name__}: {reason})") from None
        if reaper is not None:
            reaper.watch(cluster_pids())
        self._owns_ray = True
        self._reaper = reaper

    def _workers_fitting(self, resources: dict) -> int:
        if self.gpus_per_pack:
            n, key = int(resources.get("GPU", 0) // self.gpus_per_pack), "GPU"
        else:
            n, key = int(resources.get("CPU", 0) // self.cpus_per_pack), "CPU"
        if n < 1:
            raise ConfigError(f"executor.num_workers=null: the cluster has no {key} for one "
                              f"worker ({_resources()}); set executor.gpus_per_pack or "
                              "executor.cpus_per_pack")
        return n

    def on_device(self, fn: Callable[..., Any], *args: Any) -> Any:
        import ray

        try:
            result, self._views[0] = ray.get(self._actors[0].on_device.remote(fn, *args))
        except ray.exceptions.RayTaskError as e:
            raise _cause(e) from None
        except ray.exceptions.RayActorError as e:
            raise ExecutorError(f"executor: the worker measuring the device died: "
                                f"{' '.join(str(e).split())[:160]}") from None
        return result

    def view(self) -> CacheView:
        return CacheView.merged(self._views)

    @property
    def workers(self) -> int:
        return len(self._actors)

    def _dispatch(self, job: PackJob) -> None:
        """Queues ``job`` for the first ready actor that is free: at once if there is one.

        An actor still starting (importing TensorFlow, loading the data) takes nothing: a
        pack queued behind it would wait while the ready ones trained the rest of the rung
        (a straggler holding the rung back, or, in a short search, the only pack that actor
        ever trained). The first actor is ready once it has measured the device; the others
        join as they become ready.
        """
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

    def _started(self, ref: Any) -> None:
        """Marks the actor that answered ``ref`` ready. One that died as it started (its
        ``__init__`` failed, or its node was lost) leaves the pool with a warning while
        others can still train; when none can, the run stops in one line with its cause."""
        import ray

        worker = self._starting.pop(ref)
        try:
            ray.get(ref)
        except ray.exceptions.RayError as e:
            # Ray's message ends with the exception __init__ raised.
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            reason = (lines[-1] if lines else type(e).__name__)[:200]
            if not self._ready and not self._starting:
                raise ExecutorError(f"executor: every worker died as it started (importing "
                                    f"TensorFlow, loading the data); worker {worker}: "
                                    f"{reason}") from None
            log.warning("executor: worker %d died as it started, the others train on: %s",
                        worker, reason)
            return
        self._ready.add(worker)

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        import ray

        while True:
            self._send_queued()
            waiting = [*self._refs, *self._starting]
            if not waiting:
                raise RuntimeError("_collect: no pack in flight and no worker starting")
            # With no pack in flight, only actors still starting can take the queued ones.
            timeout = None if self._refs else self.ready_timeout_s
            ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            if not ready:
                raise ExecutorError(
                    f"executor.ready_timeout_s={self.ready_timeout_s:g}: no worker was ready "
                    f"to train in time ({len(self._starting)} still importing TensorFlow or "
                    "loading the data); raise it for a slow cluster")
            [ref] = ready
            if ref in self._starting:
                self._started(ref)
                continue
            job, worker = self._refs.pop(ref)
            (runs, worked), self._views[worker] = self._get(ref, job)
            received = time.perf_counter()
            self._drop_other_attempts(job.key, runs)
            # The actor just freed takes the oldest queued pack. (A worker that died as it
            # started cannot stop the run here: this one is ready, so it only warns.)
            self._send_queued()
            return job, [unpack(r, job, received) for r in runs], worked

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

    def _get(self, ref: Any, job: PackJob) -> tuple[tuple[list[dict], tuple[float, float]],
                                                    CacheView]:
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            raise _cause(e) from None
        except ray.exceptions.RayActorError as e:
            reason = " ".join(str(e).split())[:160]
            raise ExecutorError(
                f"executor: pack {job.key}'s worker died and its retries are spent "
                f"(executor.max_restarts={self.max_restarts}, "
                f"executor.max_task_retries={self.max_task_retries}): {reason}; finished packs "
                "are journaled: add resume=true to finish the run") from None

    def _drop_other_attempts(self, key: str, runs: list[dict]) -> None:
        """Files of a killed attempt of the same pack: only the one published counts, and
        the checkpoints a resumed run's journal names (``discard``'s ``keep``)."""
        kept = {r["attempt"] for r in runs}
        for other in (self.shared_dir / ATTEMPTS).glob(f"{key}.*"):
            if other.name in kept:
                continue
            for path in other.glob("*"):
                if str(path) not in self._journaled:
                    path.unlink(missing_ok=True)
            if not any(other.iterdir()):
                other.rmdir()

    def discard(self, keep: set[str]) -> None:
        self._journaled = set(keep)
        discard_attempts(self.shared_dir / ATTEMPTS, keep)

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        from ray.util.placement_group import remove_placement_group

        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []
        self._views = []
        self._starting = {}
        self._ready = set()
        self._queued = []
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None
        prune_attempts(self.shared_dir / ATTEMPTS)
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None


def _cause(error: Any) -> BaseException:
    """A worker's exception as the driver raises it: packexp's own errors as they are (one
    line naming the key), others with the worker's traceback."""
    if isinstance(error.cause, ConfigError | ExecutorError):
        return error.cause
    return error.as_instanceof_cause()


def _check_reachable(address: str | None, timeout_s: float = 10) -> None:
    """A ``host:port`` that refuses connections fails here, at once; ``ray.init`` would retry
    for minutes."""
    import socket

    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit():
        return  # None or auto: Ray finds (or fails to find) the cluster itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"executor.address={address}: no Ray cluster answers there "
                          f"({e.strerror or type(e).__name__}); start one with "
                          "`ray start --head`, or set executor.address=null for a local "
                          "cluster") from None


def _resources() -> str:
    import ray

    return ", ".join(f"{k} {v:g}" for k, v in sorted(ray.cluster_resources().items())
                     if k in ("CPU", "GPU"))
