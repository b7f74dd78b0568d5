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
from collections.abc import Iterator, Mapping
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
        with _environ(self.env):
            return self.cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1",
                                         include_dashboard=False)

    def remove_node(self, node: Any) -> None:
        """Kills the node's processes (its raylet, its workers) at once, as a lost machine."""
        self.cluster.remove_node(node, allow_graceful=False)


@contextlib.contextmanager
def loopback_cluster(env: Mapping[str, str], nodes: int = 2,
                     cpus: int = 1) -> Iterator[LoopbackCluster]:
    """``nodes`` nodes (the head among them) of ``cpus`` CPUs each, their files where
    ``env``'s ``RAY_TMPDIR`` says; all of them stopped on leaving."""
    from ray.cluster_utils import Cluster

    env = {**env, **CLUSTER_ENV}
    with _environ(env):
        cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
            "num_cpus": cpus, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    made = LoopbackCluster(cluster, env)
    try:
        for _ in range(nodes - 1):
            made.add_node(cpus)
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


# ``python -m packexp`` whose workers take ``delay`` seconds more over each pack, after
# training it and before handing it back, and mark that they are in a pack
# (``<marks>/<node id>.busy``): a node removed while the mark is there is lost mid-pack,
# however fast the machine trains. A worker on ``only`` (a node id; empty: every node) alone
# waits.
TAKES_ITS_TIME = """
import os, runpy, sys, time
from pathlib import Path
import ray
from packexp.executors import ray as ray_executor

marks, delay, only = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]


class TakesItsTime(ray_executor.PackWorker):
    def run_pack(self, job):
        done = super().run_pack(job)
        node = ray.get_runtime_context().get_node_id()
        if not only or node == only:
            busy = marks / f"{node}.busy"
            busy.touch()
            time.sleep(delay)
            busy.unlink()
        return done


ray_executor.PackWorker = TakesItsTime
sys.argv = [sys.argv[0], *sys.argv[4:]]
runpy.run_module("packexp", run_name="__main__", alter_sys=True)
"""


def driver(run_dir: Path, cluster: LoopbackCluster, overrides: list[str], marks: Path,
           delay: float = 0.0, only: str = "") -> subprocess.Popen:
    """``python -m packexp executor=ray`` joining ``cluster``, its workers as
    ``TAKES_ITS_TIME`` says; its stderr piped."""
    marks.mkdir(parents=True, exist_ok=True)
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", TAKES_ITS_TIME, str(marks), str(delay), only, *overrides,
         "executor=ray", f"executor.address={cluster.address}", f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
