"""Executors: the local one is today's loop; the Ray one's absence and bad keys are one line."""

from __future__ import annotations

import sys

import pytest

from packexp.config import instantiate
from packexp.errors import ConfigError
from packexp.executors import LocalExecutor
from tests.conftest import compose_config


def test_local_is_the_default():
    executor = instantiate(compose_config().executor, "executor")(cfg=None, run_dir=None)
    assert isinstance(executor, LocalExecutor)


@pytest.fixture
def loopback_env(monkeypatch):
    """What ``executor=ray`` with no address sets for its own cluster, undone afterwards."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def test_ray_without_the_extra_is_one_line_naming_the_pip_command(monkeypatch, loopback_env):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.delitem(sys.modules, "packexp.executors.ray", raising=False)
    with pytest.raises(ConfigError, match=r"^executor=ray: Ray is not installed; "
                                          r"pip install -e '\.\[ray\]'$"):
        instantiate(compose_config(["executor=ray"]).executor, "executor")(cfg=None,
                                                                           run_dir=None)


@pytest.mark.parametrize("key, value", [("gpus_per_pack", 0.3), ("num_workers", 0)])
def test_ray_keys_out_of_range_name_themselves(key, value, loopback_env):
    pytest.importorskip("ray")
    node = compose_config(["executor=ray", f"executor.{key}={value}"]).executor
    with pytest.raises(ConfigError, match=rf"^executor\.{key}={value}: "):
        instantiate(node, "executor")(cfg=None, run_dir=None)


def test_a_resume_keeps_only_the_journaled_attempts(tmp_path):
    from packexp.executors import ATTEMPTS

    root = tmp_path / ATTEMPTS
    counted, killed = root / "b1-r0-p00.aaaa" / "t1.npz", root / "b1-r0-p00.bbbb" / "t1.npz"
    for path in (counted, killed):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
    LocalExecutor(run_dir=tmp_path).discard({str(counted)})
    assert [p for p in root.rglob("*") if p.is_file()] == [counted]
    assert not killed.parent.exists()
