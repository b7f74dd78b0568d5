"""Fixtures for every test module: seeding, a fast tune config and the GPU skip."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# How TensorFlow runs in the test workers and in every process a test starts (python -m
# packexp, a script, Ray's workers: they inherit the environment), set before it loads
# (docs/testing.md, "TensorFlow in the suite"); every comparison a test makes is between runs
# under the same settings:
# - one thread per process (its intra-op and inter-op pools): two xdist workers already keep
#   both cores busy, and pools as wide as the machine in each only wait on each other;
# - oneDNN's custom operations off: TensorFlow turns them on by default on some x86 CPUs only,
#   so the suite's numbers no longer depend on the CPU, and on these tiny models they cost
#   more than they save. tests/system/test_onednn.py runs the isolation checks with them on.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import pytest
from omegaconf import DictConfig, open_dict

from packexp.testing.config import ROOT, compose_config
from packexp.testing.processes import describe, free_port, ray_processes, wait_until

pytest_plugins = ["packexp.testing.fixtures"]

# packexp.tune's home (~/packexp by default: runs, the MLflow store, calibrations) is the
# test run's own, so no test writes in the user's, whatever the shell exports.
HOME = tempfile.mkdtemp(prefix="packexp-home-")
os.environ["PACKEXP_HOME"] = HOME
atexit.register(shutil.rmtree, HOME, True)


@pytest.fixture(autouse=True)
def seed_everything() -> None:
    """Seeds Python, NumPy and TensorFlow (when imported) before every test."""
    random.seed(0)
    np.random.seed(0)
    import sys

    if "tensorflow" in sys.modules:
        import keras

        keras.utils.set_random_seed(0)


# What a test may do beyond plain Python is what its markers say: the layers of
# docs/testing.md hold only if markers tell the truth, so an unmarked test that starts a
# process or loads TensorFlow fails, naming the marker it lacks.
HEAVY = {"tf", "process", "slow", "gpu"}


@pytest.fixture(autouse=True)
def markers_tell_the_truth(request, monkeypatch):
    if HEAVY & {m.name for m in request.node.iter_markers()}:
        yield
        return
    started: list[str] = []
    execute = subprocess.Popen._execute_child

    def noting(self, args, *rest, **kwargs):
        started.append(" ".join(map(str, args))[:120] if isinstance(args, list | tuple)
                       else str(args)[:120])
        return execute(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", noting)
    tf_before = "tensorflow" in sys.modules
    yield
    assert not started, f"unmarked test started a process (mark it process): {started}"
    assert tf_before or "tensorflow" not in sys.modules, (
        "unmarked test loaded TensorFlow (mark it tf)")


# Rough seconds a test of each kind costs on a 2-core machine (docs/testing.md): modules are
# handed to xdist's workers whole (--dist loadscope), the costliest first, so that no long
# module starts last and leaves one worker idle at the end.
COST = {"slow": 30.0, "search": 15.0, "process": 5.0, "tf": 3.0}


SYSTEM = Path(__file__).resolve().parent / "system"


@pytest.hookimpl(tryfirst=True)  # before -m deselects: ``-m system`` selects what it marks
def pytest_collection_modifyitems(config, items) -> None:
    modules: dict[str, float] = {}
    for item in items:
        # The system layer (docs/testing.md): every test in tests/system, and a test anywhere
        # that starts a process (``process``, ``slow``). make test leaves it to make
        # test-system.
        if item.path.is_relative_to(SYSTEM) or {"process", "slow"} & {
                m.name for m in item.iter_markers()}:
            item.add_marker(pytest.mark.system)
        marks = {m.name for m in item.iter_markers()}
        cost = max((COST[m] for m in marks & COST.keys()), default=0.01)
        modules[item.nodeid.split("::")[0]] = modules.get(item.nodeid.split("::")[0], 0) + cost
    items.sort(key=lambda item: -modules[item.nodeid.split("::")[0]])  # stable within a module


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """A module the ``-m`` expression deselects whole, by its ``pytestmark`` whatever its tests
    add, is not imported at all: ``-m "not tf and not process"`` then loads no TensorFlow for
    the modules marked ``tf`` while it collects."""
    expression = config.option.markexpr
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith(
            "test_"):
        return None
    marks = set(re.findall(r"pytest\.mark\.(\w+)", _module_marks(collection_path)))
    if not marks:
        return None
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    others = sorted(compiled.idents() - marks)
    for added in itertools.product((False, True), repeat=len(others)):
        on = marks | {name for name, yes in zip(others, added, strict=True) if yes}
        if compiled.evaluate(lambda name, **_: name in on):  # noqa: B023 (used at once)
            return None  # some test of the module may be selected
    return True


def _module_marks(path: Path) -> str:
    """The text of the module's ``pytestmark = ...`` line, if it has one."""
    found = re.search(r"^pytestmark = (.+)$", path.read_text(), re.MULTILINE)
    return found.group(1) if found else ""


@pytest.fixture
def cfg_tune(tmp_path) -> DictConfig:
    """A fast tune config whose MLflow store lives in ``tmp_path``."""
    cfg = compose_config(["experiment=quick", "tracking=mlflow"])
    with open_dict(cfg):
        cfg.tracking.store_dir = str(tmp_path / "store")
    return cfg


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # At set-up, not collection: asking TensorFlow then keeps its CUDA log in the capture.
    if "gpu" in item.keywords:
        from packexp.telemetry import gpu_device

        if gpu_device() is None:
            item.add_marker(pytest.mark.skip(reason="needs a GPU"))


@pytest.fixture
def ray_env(tmp_path):
    """Environment of a run on Ray: its files in a short temporary directory (its socket
    paths must stay short), HOME in ``tmp_path``; afterwards no process of that Ray is left."""
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    home = tmp_path / "home"
    home.mkdir()
    yield _ray_environ(ray_tmp, home)
    assert wait_until(lambda: not ray_processes(ray_tmp), 30), ray_processes(ray_tmp)
    assert not [p for p in home.rglob("*") if "ray" in p.name.lower()]
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _ray_environ(ray_tmp: str, home: Path) -> dict:
    """A Ray's environment: its files in ``ray_tmp`` (socket paths must stay short), HOME in
    ``home``, this checkout importable."""
    return {**os.environ, "RAY_TMPDIR": ray_tmp, "HOME": str(home),
            "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


class RayCluster:
    """A cluster someone started with ``ray start --head``: ``address`` for
    ``executor.address``, ``env`` for the drivers that join it."""

    def __init__(self, env: dict, address: str) -> None:
        self.env, self.address = env, address

    def actors(self) -> list[str]:
        """The cluster's processes running an actor or a task (Ray titles them
        ``ray::<class or function>``; a pooled worker with nothing to run is ``ray::IDLE``)."""
        import psutil

        found = []
        for pid in ray_processes(self.env["RAY_TMPDIR"]):
            try:
                title = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if title.startswith("ray::") and not title.startswith("ray::IDLE"):
                found.append(f"{pid} {title[:80]}")
        return found


@pytest.fixture(scope="module")
def _ray_head(tmp_path_factory):
    """``ray start --head`` with two CPUs, once per module (see ``ray_cluster``)."""
    pytest.importorskip("ray")
    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")
    home = tmp_path_factory.mktemp("ray_home")
    env = {**_ray_environ(ray_tmp, home), "RAY_AUTH_MODE": "disabled",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    port = free_port()
    head = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
         f"--port={port}", "--num-cpus=2", "--node-ip-address=127.0.0.1",
         "--include-dashboard=false", "--disable-usage-stats"],
        # Workers at the drivers' priority (Ray's default lowers it by 15); on SIGTERM, stop
        # at once rather than drain the node for up to 30 s.
        env={**env, "RAY_worker_niceness": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # ray start writes the cluster's address file once its node is up.
        assert wait_until(lambda: head.poll() is not None or (
            _answers(port) and any(Path(ray_tmp).rglob("ray_current_cluster"))), 60)
        assert head.poll() is None, f"ray start --head exited {head.returncode}"
        yield RayCluster(env, f"127.0.0.1:{port}")
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    if not wait_until(lambda: not ray_processes(ray_tmp), 30):
        left = ray_processes(ray_tmp)
        for pid in left:  # the failure names them; none outlives the suite
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"ray start --head left {describe(left)}")
    assert not [p for p in home.rglob("*") if "ray" in p.name.lower()]
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def ray_cluster(_ray_head):
    """One cluster of two CPUs, ``ray start --head`` on loopback, for a module's tests that
    join a cluster rather than start their own (``ray.init`` of a local cluster takes about
    5 s, and its shutdown 1 s, in each driver that starts one). Its workers train at the
    drivers' priority, as those of a cluster a run starts do (packexp/executors/ray.py).
    A driver's actors and placement group end with its job: after each test no actor of it
    is left, so the next finds the cluster's two CPUs free. After the module no process of
    the cluster is left, and nothing of Ray's in its HOME."""
    yield _ray_head
    assert wait_until(lambda: not _ray_head.actors(), 30), _ray_head.actors()


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
