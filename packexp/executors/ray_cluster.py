"""Joining or starting a Ray cluster (``connect``), and what its errors say about a worker
(``lost_errors``, ``death``, ``cause``): ``ray.py``'s ``RayExecutor`` and its pool
(``ray_pool.py``) keep the actors with them."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from packexp.errors import ConfigError, ExecutorError
from packexp.executors.reaper import Reaper, cluster_pids

INSTALL = "pip install -e '.[ray]'"
# ``executor.placement`` as Ray schedules each worker: DEFAULT fills a node before the next.
PLACEMENTS = {"PACK": "DEFAULT", "SPREAD": "SPREAD"}


def connect(address: str | None) -> Reaper | None:
    """``ray.init`` at ``address`` (None: a loopback cluster of this process, ended with it
    however it ends: the reaper returned). A refused ``host:port`` or a failed join is one
    line naming ``executor.address``; packexp's signal handlers are kept."""
    import ray

    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "configure_logging": False}
    if address is None:
        kwargs["_node_ip_address"] = "127.0.0.1"
    check_reachable(address)
    reaper = Reaper() if address is None else None
    try:
        with signals_kept():
            ray.init(address=address, **kwargs)
    except BaseException as e:  # ConnectionError, RuntimeError, ValueError, auth errors;
        if reaper is not None:  # an interrupt too: the cluster started so far goes
            reaper.watch(cluster_pids())
            reaper.close()
        if not isinstance(e, Exception):
            raise
        reason = " ".join(str(e).split())[:200]
        raise ConfigError(f"executor.address={address}: cannot join a Ray cluster there "
                          f"({type(e).__name__}: {reason})") from None
    if reaper is not None:
        reaper.watch(cluster_pids())
    return reaper


def check_settings(*, num_workers: int | None, gpus_per_pack: float, placement: str,
                   max_restarts: int, max_task_retries: int) -> None:
    """The pool's settings as ``executor=ray`` takes them, or one line naming the key."""
    if gpus_per_pack not in (0, 0.25, 0.5) and not (
            gpus_per_pack >= 1 and float(gpus_per_pack).is_integer()):
        raise ConfigError(f"executor.gpus_per_pack={gpus_per_pack}: must be 0 (CPU), 0.25, "
                          "0.5 or a whole number of GPUs")
    if num_workers is not None and num_workers < 1:
        raise ConfigError(f"executor.num_workers={num_workers}: must be at least 1")
    if placement not in PLACEMENTS:
        raise ConfigError(f"executor.placement={placement}: must be PACK or SPREAD (each "
                          "worker is placed alone, so that a lost node's can be replaced "
                          "wherever there is room)")
    for key, value in (("max_restarts", max_restarts), ("max_task_retries", max_task_retries)):
        if value < 0:
            raise ConfigError(f"executor.{key}={value}: must be at least 0")


def room(cpus_per_pack: float, gpus_per_pack: float) -> int:
    """Workers of ``cpus_per_pack`` CPUs and ``gpus_per_pack`` of a GPU the cluster's
    resources hold now (by GPUs where workers take a share of one)."""
    import ray

    resources = ray.cluster_resources()
    if gpus_per_pack:
        return int(resources.get("GPU", 0) // gpus_per_pack)
    return int(resources.get("CPU", 0) // cpus_per_pack)


def prepare(address: str | None) -> None:
    """Ray's environment for ``address``, set before Ray is imported; Ray missing is one
    line saying how to install it."""
    if address is None or address.rpartition(":")[0] in ("127.0.0.1", "localhost"):
        # Loopback: Ray reads this flag at import; it makes the node's address 127.0.0.1
        # rather than the machine's.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if address is None:
        # A cluster of this run alone, on loopback: nothing else can reach it, so it needs
        # no token, which Ray would otherwise write under ~/.ray.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError(f"executor=ray: Ray is not installed; {INSTALL}") from None


def cause(error: Any) -> BaseException:
    """A worker's exception as the driver raises it: packexp's own errors as they are (one
    line naming the key), others with the worker's traceback."""
    if isinstance(error.cause, ConfigError | ExecutorError):
        return error.cause
    return error.as_instanceof_cause()


def lost_errors() -> tuple[type[BaseException], ...]:
    """What a call to an actor raises when the actor is gone: its process or its node died
    (or its result died with the node's object store)."""
    import ray

    errors = ray.exceptions
    return tuple(getattr(errors, name) for name in (
        "RayActorError", "ObjectLostError", "OutOfMemoryError", "NodeDiedError",
        "ActorUnschedulableError") if hasattr(errors, name))


def reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"


def death(where: dict, error: BaseException) -> str:
    """Why an actor is gone, as the warning says it: its node lost, its process dead, or (as
    a node's loss first shows, seconds before the cluster declares the node dead) no answer
    from either."""
    import ray

    node, host = where.get("node") or "", where.get("host")
    try:
        alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    except Exception:  # the cluster's state unreadable: say what Ray said
        alive = {}
    on = f"on node {node[:8]} ({host})" if node else "on its node"
    if node and alive and not alive.get(node, False):
        return f"its node {node[:8]} ({host}) was lost"
    if isinstance(error, getattr(ray.exceptions, "OutOfMemoryError", ())):
        return f"Ray's memory monitor killed it {on} (the node ran out of memory)"
    if isinstance(error, ray.exceptions.ActorUnavailableError | TimeoutError):
        return f"it stopped answering {on}: its process or its node is gone"
    if isinstance(error, ray.exceptions.ObjectLostError):
        return f"its result was lost {on}"
    return f"its process (pid {where.get('pid')}) {on} died"


@contextlib.contextmanager
def signals_kept() -> Iterator[None]:
    """``ray.init`` sets a SIGTERM handler of its own (Python's, and its core worker's, which
    prints a crash dump): the process's handlers are put back, so SIGTERM and Ctrl-C end a
    run on Ray as they end a local one (one line, the resume command, 143 or 130)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in kept.items():
            if handler is not None:
                signal.signal(signum, handler)


def check_reachable(address: str | None, timeout_s: float = 10) -> None:
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


def resources() -> str:
    import ray

    return ", ".join(f"{k} {v:g}" for k, v in sorted(ray.cluster_resources().items())
                     if k in ("CPU", "GPU"))
