"""A Ray cluster of several nodes on this machine, and a driver whose workers take their time
where a test wants a fault to land: ``executor=ray``'s faults, tested and measured
(``tests/system/test_ray_faults.py``, ``scripts/ray_faults.py``).

``ray.cluster_utils.Cluster`` starts each node as its own raylet on loopback; removing one
kills its processes as a lost machine's would stop (its workers' packs never come back).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from packexp.testing.config import ROOT

# What the nodes and the drivers that join them need: loopback, no token (nothing else can
# reach a loopback cluster), no usage report, and workers at the driver's priority (Ray lowers
# theirs by 15, which starves them behind a loaded suite).
CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0",
               "TF_CPP_MIN_LOG_LEVEL": "2"}


class LoopbackCluster:
    """Nodes of one CPU each on 127.0.0.1; ``address`` for ``executor.address``, ``env`` for
    the drivers that join it."""

    def __init__(self, cluster: Any, env: Mapping[str, str]) -> None:
        self.cluster = cluster
        self.env = dict(env)

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def head(self) -> Any:
        return self.cluster.head_node

    def nodes(self) -> list[Any]:
        """The nodes other than the head, oldest first."""
        return sorted(self.cluster.worker_nodes, key=lambda n: n.unique_id)

    def add_node(self, cpus: int = 1) -> Any:
        """One more node of ``cpus`` CPUs, once it is alive."""
        with _environ(self.env):
            return self.cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1",
                                         include_dashboard=False)

    def remove_node(self, node: Any) -> None:
        """Kills the node's processes (its raylet, its workers) at once, as a lost machine."""
        self.cluster.remove_node(node, allow_graceful=False)


@contextlib.contextmanager
def loopback_cluster(env: Mapping[str, str], nodes: int = 2,
                     cpus: int | Sequence[int] = 1) -> Iterator[LoopbackCluster]:
    """``nodes`` nodes (the head first) of ``cpus`` CPUs each (or as many as ``cpus`` lists,
    node by node), their files where ``env``'s ``RAY_TMPDIR`` says; all of them stopped on
    leaving."""
    from ray.cluster_utils import Cluster

    each = [cpus] * nodes if isinstance(cpus, int) else list(cpus)
    env = {**env, **CLUSTER_ENV}
    with _environ(env):
        cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
            "num_cpus": each[0], "node_ip_address": "127.0.0.1", "include_dashboard": False})
    made = LoopbackCluster(cluster, env)
    try:
        for n in each[1:]:
            made.add_node(n)
        yield made
    finally:
        with _environ(env):
            cluster.shutdown()


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` as ``env`` says while nodes start: they inherit this process's."""
    before = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


# ``python -m packexp`` whose workers take their time where a fault must land, however fast
# the machine trains:
# - a worker on ``slow`` (a node id) holds each pack ``delay`` seconds after training it,
#   before handing it back, and marks that it is in a pack (``<marks>/<node id>.busy``): a
#   node removed while the mark is there is lost mid-pack. With ``once``, only the first pack
#   trained on that node is held.
# - a worker on ``gated`` (a node id), from its ``gate_from``-th pack on, holds each until a
#   worker on another node is ready (``<marks>/<node id>.<pid>.ready``, written as each
#   worker's ``__init__`` ends), at most 180 s: packs are left for that worker to take.
TAKES_ITS_TIME = """
import os, runpy, sys, time
from pathlib import Path
import ray
from packexp.executors import ray as ray_executor

marks, delay, slow, once, gated, gate_from = (Path(sys.argv[1]), float(sys.argv[2]),
                                              sys.argv[3], sys.argv[4] == "1", sys.argv[5],
                                              int(sys.argv[6]))


class TakesItsTime(ray_executor.PackWorker):
    def __init__(self, *args):
        super().__init__(*args)
        self.node = ray.get_runtime_context().get_node_id()
        self.packs = 0
        (marks / f"{self.node}.{os.getpid()}.ready").touch()

    def run_pack(self, job):
        done = super().run_pack(job)
        self.packs += 1
        if self.node == gated and gate_from and self.packs >= gate_from:
            end = time.monotonic() + 180
            while time.monotonic() < end and not any(
                    not p.name.startswith(self.node) for p in marks.glob("*.ready")):
                time.sleep(0.1)
        if self.node == slow:
            try:
                os.close(os.open(marks / f"{self.node}.held", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                if once:
                    return done
            busy = marks / f"{self.node}.busy"
            busy.touch()
            time.sleep(delay)
            busy.unlink()
        return done


ray_executor.PackWorker = TakesItsTime
sys.argv = [sys.argv[0], *sys.argv[7:]]
runpy.run_module("packexp", run_name="__main__", alter_sys=True)
"""


def driver(run_dir: Path, cluster: LoopbackCluster, overrides: list[str], marks: Path,
           delay: float = 0.0, slow: str = "", once: bool = False, gated: str = "",
           gate_from: int = 0) -> subprocess.Popen:
    """``python -m packexp executor=ray`` joining ``cluster``, its workers as
    ``TAKES_ITS_TIME`` says; its output piped."""
    marks.mkdir(parents=True, exist_ok=True)
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", TAKES_ITS_TIME, str(marks), str(delay), slow,
         "1" if once else "0", gated, str(gate_from), *overrides, "executor=ray",
         f"executor.address={cluster.address}", f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
