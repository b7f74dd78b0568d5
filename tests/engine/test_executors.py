"""Executors: the local one is today's loop; the Ray one's absence and bad keys are one line."""

from __future__ import annotations

import sys

import pytest

from packexp.config import instantiate
from packexp.errors import ConfigError
from packexp.executors import LocalExecutor
from packexp.testing.config import compose_config


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


# What planning sees of the caches where packs train.

A, B, C = ("a",), ("b",), ("c",)


def test_workers_caches_merge_by_union_and_the_largest_count():
    from packexp.executors import CacheView

    one = CacheView(frozenset({(A, False, "off")}), {A: 2, B: 1}, frozenset({A}))
    two = CacheView(frozenset({(B, B, False, "off")}), {A: 1, B: 3, C: 1}, frozenset({C}))
    merged = CacheView.merged([one, two])
    assert merged.kept == {(A, False, "off"), (B, B, False, "off")}
    # A pack goes to one worker: it can take 2 of A (from one), not 3.
    assert merged.members == {A: 2, B: 3, C: 1}
    assert merged.replayed == {A, C}
    assert CacheView.merged([]) == CacheView()


def test_affinity_ranks_a_kept_pack_then_built_members_then_replayed_ones():
    from packexp.executors import CacheView

    key = (A, A, False, "off")
    whole = CacheView(frozenset({key}), {A: 2})
    members = CacheView(frozenset(), {A: 1, B: 5})
    replayed = CacheView(replayed=frozenset({A}))
    empty = CacheView()
    ranked = sorted([empty, replayed, members, whole],
                    key=lambda v: v.affinity(key, [A, A]), reverse=True)
    assert ranked == [whole, members, replayed, empty]
    assert members.affinity(key, [A, A]) == (False, 1, 0)  # one A built, not two


@pytest.mark.tf
def test_the_local_executor_measures_and_reports_its_own_cache(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from packexp import telemetry
    from packexp.config import fit_dataset_to_model
    from packexp.config.components import worker_cache
    from packexp.config.device import device_capacity, limit_here
    from packexp.executors import CacheView, PackJob
    from packexp.space import Trial

    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=None: None)  # a CPU's budget
    cfg = compose_config(["experiment=quick", "pack.fusion=off", "device.memory_budget_mb=48"])
    fit_dataset_to_model(cfg)
    cache = worker_cache(cfg)
    executor = LocalExecutor(cfg, tmp_path).start(cache)
    device = OmegaConf.to_container(cfg.device, resolve=True)
    assert executor.on_device(limit_here, device) == (48 * 2**20, "device.memory_budget_mb=48")
    capacity, source, _ = device_capacity(cfg.device, 4, cache.make_member, executor.on_device)
    assert (capacity.limit, source) == (48 * 2**20, "device.memory_budget_mb=48")
    assert executor.view() == CacheView()
    hparams = {"batch_size": 32, "optimizer": "adam", "learning_rate": 0.01,
               "activation": "relu"}
    group = [Trial(f"t{i}", hparams, (), seed=i) for i in range(2)]
    [(_, [run])] = list(executor.run([PackJob("p", group, 0.05, {"t0": None, "t1": None})]))
    assert not run.reused
    assert executor.view().kept == {cache.key(group)}


@pytest.mark.tf
@pytest.mark.parametrize("overrides, hidden", [
    ([], False), (["executor=ray"], True),
    (["executor=ray", "task=profile", "profile=num_models"], False),  # profiles train here
])
def test_the_driver_leaves_the_gpu_to_ray_workers(monkeypatch, overrides, hidden):
    import tensorflow as tf

    from packexp import telemetry
    from packexp.app import main as run

    calls = []
    monkeypatch.setattr(tf.config, "set_visible_devices", lambda *a: calls.append(a))
    monkeypatch.setattr(telemetry, "_gpu_left", False)
    run.start_tensorflow(use_gpu=run.trains_here(compose_config(overrides)))
    assert calls == ([([], "GPU")] if hidden else [])
    assert telemetry.gpu_left() is hidden


def test_a_gpu_left_to_workers_is_not_planned_on(monkeypatch):
    from packexp import telemetry
    from packexp.config.device import device_capacity_bytes

    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=None: (16 * 2**30, 8 * 2**30))
    monkeypatch.setattr(telemetry, "_gpu_left", True)
    assert device_capacity_bytes(100, gpu_fraction=0.5) == (100 * 2**20,
                                                            "device.memory_budget_mb=100")
