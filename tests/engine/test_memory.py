"""Member memory costs, the out-of-memory split and memory telemetry (a pack's byte capacity
without TensorFlow: test_device.py)."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import mmap
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hydra.utils import instantiate

from packexp import telemetry
from packexp.app.main import run
from packexp.config.device import device_capacity_bytes
from packexp.errors import ConfigError
from packexp.models import mlp3, mobilenet
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.cache import PackCache
from packexp.packing.memory import (
    MemoryModel,
    activation_elements,
    estimate_bytes,
)
from packexp.packing.trainer import train_group
from packexp.space import Trial, derive_seed
from packexp.strategies import Capacity, WeighsCosts
from packexp.testing.calibration import device
from packexp.testing.config import CONF_DIR, compose_config

pytestmark = pytest.mark.tf

STRATEGIES = sorted(p.stem for p in Path(CONF_DIR, "strategy").glob("*.yaml"))
MB = 2**20
TRAIN_SIZE = 300

# Five trials of different batch sizes and optimizers for the out-of-memory split.
SPLIT_CONFIGS = [(20, "adam"), (45, "momentum"), (30, "sgd"), (70, "adagrad"), (25, "adam")]


def trial(i: int, batch_size: int, optimizer: str, learning_rate: float = 1e-2) -> Trial:
    hparams = {"batch_size": batch_size, "optimizer": optimizer,
               "learning_rate": learning_rate, "activation": "relu"}
    return Trial(f"t{i}", hparams, (), seed=derive_seed(5, i))


def tiny_mlp(t: Trial | None = None):
    return mlp3.build((12,), 4, t.hparams if t else {}, width=16)


@pytest.fixture
def oom_above_two(monkeypatch):
    """Call it to make ``Pack.train`` run out of memory in packs of more than two members.

    Returns the size of every pack it was asked to train, in order.
    """
    original = Pack.train
    sizes: list[int] = []

    def train(self: Pack, steps):
        sizes.append(len(self.members))
        if len(self.members) > 2:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM")
        return original(self, steps)

    def start() -> list[int]:
        monkeypatch.setattr(Pack, "train", train)
        return sizes

    return start


# The analytic estimate.


@pytest.mark.parametrize(("optimizer", "slots"),
                         [("sgd", 2), ("adam", 2), ("momentum", 2), ("adagrad", 2),
                          ("rmsprop", 1)])
@pytest.mark.parametrize("batch_size", [1, 32])
def test_estimate_of_a_tiny_mlp_is_the_hand_count(optimizer, slots, batch_size):
    params = (12 * 16 + 16) + 2 * (16 * 16 + 16) + (16 * 4 + 4)  # three hidden, one logits
    activations = 16 + 16 + 16 + 4 + 3 * 16  # and each hidden layer's selected activation
    expected = 4 * (params * (2 + slots) + 2 * batch_size * activations)
    assert estimate_bytes(tiny_mlp(), optimizer, batch_size) == expected


def test_estimate_grows_with_batch_size():
    model = tiny_mlp()
    sizes = [estimate_bytes(model, "adam", b) for b in (1, 20, 45, 70)]
    assert sizes == sorted(sizes)
    assert len(set(sizes)) == len(sizes)


@pytest.fixture(scope="module")
def cnn():
    return mobilenet.build([32, 32, 3], 10, {"activation": "relu"}, alpha=0.35)


def test_cnn_estimate_is_positive_and_grows_with_batch_size(cnn):
    small, large = estimate_bytes(cnn, "momentum", 16), estimate_bytes(cnn, "momentum", 64)
    assert 0 < small < large
    # Activations dominate a CNN: four times the batch is well over twice the bytes.
    assert large > 2 * small


def test_cnn_estimate_counts_the_model_nested_behind_the_resize(cnn):
    small_images = mobilenet.build([16, 16, 3], 10, {"activation": "relu"}, alpha=0.35)
    assert activation_elements(small_images) >= activation_elements(cnn) + 32 * 32 * 3
    assert estimate_bytes(small_images, "adam", 8) > estimate_bytes(cnn, "adam", 8)


# The memory model and its probes.


class FakeProbe:
    """Returns fixed bytes per batch size and counts its calls."""

    def __init__(self, measured: dict[int, int]) -> None:
        self.measured = measured
        self.calls: Counter[int] = Counter()

    def __call__(self, t: Trial) -> int:
        batch = int(t.hparams["batch_size"])
        self.calls[batch] += 1
        return self.measured[batch]


def test_probe_above_the_estimate_scales_costs_up():
    probe = FakeProbe({20: 10 * MB})
    memory = MemoryModel(tiny_mlp, probe)
    adam, sgd = trial(0, 20, "adam"), trial(1, 20, "sgd")
    assert memory.estimate(adam) < 10 * MB
    assert memory.cost(adam) == pytest.approx(10 * MB, rel=1e-12)
    # The same batch size's other costs scale by the same factor.
    scale = 10 * MB / memory.estimate(adam)
    assert memory.cost(sgd) == pytest.approx(memory.estimate(sgd) * scale, rel=1e-12)
    assert memory.probes == {20: (memory.estimate(adam), 10 * MB)}


def test_probes_kept_by_one_run_are_not_run_again_by_its_resume():
    kept = []
    first = MemoryModel(tiny_mlp, FakeProbe({20: 10 * MB}), on_probe=lambda p: kept.append(
        dict(p)))
    adam = trial(0, 20, "adam")
    cost = first.cost(adam)
    assert kept == [{20: (first.estimate(adam), 10 * MB)}]

    probe = FakeProbe({20: 1})  # would lower nothing, and must not even be called
    resumed = MemoryModel(tiny_mlp, probe, known=kept[-1])
    assert resumed.cost(adam) == cost
    assert probe.calls == Counter()


def test_probe_below_the_estimate_never_scales_costs_down():
    memory = MemoryModel(tiny_mlp, FakeProbe({45: 1}))
    t = trial(0, 45, "adam")
    assert memory.cost(t) == memory.estimate(t)


def test_without_a_probe_the_cost_is_the_estimate():
    memory = MemoryModel(tiny_mlp)
    t = trial(0, 45, "momentum")
    assert memory.cost(t) == memory.estimate(t) == estimate_bytes(tiny_mlp(), "momentum", 45)
    assert memory.probes == {}


def test_the_architecture_is_probed_once_and_its_factor_applies_to_every_batch_size():
    probe = FakeProbe({20: 10 * MB, 45: 1})
    builds = Counter()

    def build(t: Trial):
        builds["model"] += 1
        return tiny_mlp(t)

    memory = MemoryModel(build, probe)
    trials = [trial(0, 20, "adam"), trial(1, 20, "sgd"), trial(2, 45, "adam"),
              trial(3, 20, "momentum"), trial(4, 45, "sgd")]
    first = [memory.cost(t) for t in trials]
    again = [memory.cost(t) for t in reversed(trials)]
    assert probe.calls == {20: 1}
    assert again == first[::-1]
    assert builds["model"] == 1  # one architecture, measured once
    scale = 10 * MB / memory.estimate(trials[0])
    assert memory.cost(trials[4]) == pytest.approx(memory.estimate(trials[4]) * scale)


# Strategies under a byte capacity.


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategies_never_exceed_a_byte_capacity(name):
    trials = instantiate(compose_config().search_space).sample(40, seed=3, bracket=3)
    # The one probe measures ~1 MB: every ~0.3 MB estimate scales up about threefold.
    probe = FakeProbe({b: MB for b in range(20, 71, 5)})
    memory = MemoryModel(lambda t: mlp3.build((64,), 10, t.hparams), probe)
    limit = 2.5 * MB
    capacity = Capacity(limit=limit, cost=memory.cost, max_members=8)
    costs = sorted(memory.cost(t) for t in trials)
    assert costs[-1] <= limit < sum(costs[-8:])  # every trial fits alone; bytes bind first

    strategy = instantiate(compose_config([f"strategy={name}"]).strategy)
    if isinstance(strategy, WeighsCosts):  # a fake device on which packs of two pay off
        strategy.use_costs(device(plain=(5e-3, 1e-3, 1e-5), fused=(5e-3, 5e-4, 1e-5)))
    packs = strategy.pack(trials, capacity)
    assert sorted(t.trial_id for p in packs for t in p) == sorted(t.trial_id for t in trials)
    for p in packs:
        assert len(p) <= 8
        assert sum(memory.cost(t) for t in p) <= limit


# The runner's budget checks.


def test_a_budget_below_one_member_is_a_config_error(tmp_path):
    cfg = compose_config(["experiment=quick", "device.memory_budget_mb=0.01"])
    with pytest.raises(ConfigError, match=r"device\.memory_budget_mb=") as info:
        run(cfg, run_dir=tmp_path)
    needs = float(info.value.args[0].split("needs ")[1].split(" MB")[0])
    assert needs > 0.01
    assert not (tmp_path / "results.json").exists()


def test_a_budget_below_one_member_names_the_budget_given(tmp_path):
    cfg = compose_config(["experiment=quick", "device.memory_budget_mb=0.01"])
    with pytest.raises(ConfigError, match=r"device\.memory_budget_mb=0\.01\b"):
        run(cfg, run_dir=tmp_path)


@pytest.mark.parametrize("budget", ["-1", "0", "null"])
def test_a_missing_or_negative_budget_is_a_config_error(tmp_path, budget):
    cfg = compose_config(["experiment=quick", f"device.memory_budget_mb={budget}"])
    with pytest.raises(ConfigError, match=r"^device\.memory_budget_mb="):
        run(cfg, run_dir=tmp_path)
    assert not (tmp_path / "results.json").exists()


def test_a_non_numeric_budget_is_a_config_error(tmp_path):
    cfg = compose_config(["experiment=quick", "device.memory_budget_mb=abc"])
    with pytest.raises(ConfigError, match=r"device\.memory_budget_mb"):
        run(cfg, run_dir=tmp_path)


def test_on_a_gpu_a_member_too_large_is_blamed_on_gpu_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: (2**30, 2**10))
    cfg = compose_config(["experiment=quick", "device.probe=false"])
    with pytest.raises(ConfigError) as info:
        run(cfg, run_dir=tmp_path)
    assert "memory_budget_mb" not in str(info.value)
    assert "gpu_memory_fraction" in str(info.value)


@pytest.mark.gpu
def test_device_capacity_uses_nvml_free_memory():
    import pynvml

    pynvml.nvmlInit()
    free = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free
    total, seen_free = telemetry.gpu_memory()
    assert seen_free == pytest.approx(free, rel=0.05)
    assert seen_free <= total
    assert device_capacity_bytes(1, gpu_fraction=0.5)[0] == pytest.approx(0.5 * free, rel=0.05)


# The out-of-memory split.


def run_group(features_data: DeviceData, trials: list[Trial], keep: int = 0):
    make_member = functools.partial(Member.create, build_model=functools.partial(
        mlp3.build, width=16), input_shape=(12,), num_classes=4, train_size=TRAIN_SIZE)
    cache = PackCache(make_member, features_data,
                      {"fusion": "off", "jit_compile": False, "chunk_steps": 7}, keep=keep)
    return train_group(trials, cache, epochs=1.5, states={})


@pytest.mark.parametrize("keep", [0, 32])
def test_a_pack_out_of_memory_is_split_without_losing_or_changing_members(features_data,
                                                                          oom_above_two, keep):
    trials = [trial(i, *c) for i, c in enumerate(SPLIT_CONFIGS)]
    [whole] = run_group(features_data, trials, keep)
    assert whole.splits == 0
    reference = {m.trial_id: m for m in whole.members}

    sizes = oom_above_two()
    runs = run_group(features_data, trials, keep)
    assert sizes == [5, 2, 3, 1, 2]  # halves, then the over-full half again
    assert [len(r.members) for r in runs] == [2, 1, 2]
    assert [r.splits for r in runs] == [1, 2, 2]
    assert sorted(m.trial_id for r in runs for m in r.members) == sorted(reference)
    for r in runs:
        assert set(r.evaluation) == {m.trial_id for m in r.members}
        for m in r.members:
            ref = reference[m.trial_id]
            batch = m.trial.hparams["batch_size"]
            assert m.step == ref.step == round(1.5 * (TRAIN_SIZE // batch))
            for a, b in zip(m.state.weights + m.state.slots, ref.state.weights + ref.state.slots,
                            strict=True):
                np.testing.assert_array_equal(a, b)
            assert r.evaluation[m.trial_id] == whole.evaluation[m.trial_id]


@pytest.mark.parametrize("n", [1, 2])
def test_a_single_member_out_of_memory_reraises(features_data, monkeypatch, n):
    def train(self: Pack, steps):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM")

    monkeypatch.setattr(Pack, "train", train)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        run_group(features_data, [trial(i, *c) for i, c in enumerate(SPLIT_CONFIGS[:n])])


def scores(results: dict) -> dict:
    return {t["trial_id"]: [(r["rung"], r["epochs"], r["steps"], r["val_accuracy"],
                             r["val_loss"], r["train_loss"]) for r in t["rungs"]]
            for t in results["trials"]}


def test_splitting_in_a_run_changes_no_score(tmp_path, oom_above_two):
    def tune(out: Path) -> dict:
        # Plain packs: exact; fused packs would agree only to rounding. R=3's first rung packs
        # its three trials together: one pack to split, then a promotion from it.
        run(compose_config(["experiment=quick", "pack.fusion=off"]), run_dir=out)
        return json.loads((out / "results.json").read_text())

    plain = tune(tmp_path / "plain")
    sizes = oom_above_two()
    split = tune(tmp_path / "split")
    assert max(sizes) > 2
    assert any(p["splits"] > 0 for p in split["packs"])
    assert max(len(p["members"]) for p in split["packs"]) <= 2
    assert scores(split) == scores(plain)
    assert split["best"] == plain["best"]


# Telemetry.


def test_without_a_gpu_gpu_memory_is_none_and_said_once(caplog):
    caplog.set_level(logging.INFO, logger="packexp.telemetry")
    telemetry._nvml.cache_clear()
    try:
        assert telemetry.gpu_memory() is None
        assert telemetry.gpu_memory(1) is None
        assert telemetry.gpu_utilization() is None
    finally:
        telemetry._nvml.cache_clear()
    said = [r for r in caplog.records if "no GPU telemetry" in r.getMessage()]
    assert len(said) == 1


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """Earlier tests' cyclic garbage collected, and Python's collector off within: a span's
    resident set then changes by what the span allocates (scripts/peak_memory_loop.py)."""
    was_on = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def touched(size: int) -> mmap.mmap:
    """``size`` bytes of fresh anonymous memory, every page written: resident from now on,
    whatever pages malloc kept from earlier tests (``np.empty`` may hand those back)."""
    block = mmap.mmap(-1, size)
    view = np.frombuffer(block, np.uint8)
    view.fill(1)
    del view  # an exported buffer would keep the block from closing
    return block


def test_peak_memory_on_a_cpu_sees_an_allocation():
    """The span's growth is the block's, measured where nothing else moves the resident set:
    late in a test worker, a collection inside the span freed earlier tests' cyclic garbage
    (Keras models are full of cycles), and, with the collector off, ``np.empty``'s block
    most likely came partly from a free chunk of malloc's heap, its pages still resident
    (39.7, then 19.0 of 50 MB in fresh-clone runs; ``scripts/peak_memory_loop.py`` makes
    both). The garbage is collected first, the collector kept off, and the block is a fresh
    mapping."""
    with telemetry.PeakMemory() as idle:
        pass
    assert idle.peak_bytes > 0
    assert idle.growth_bytes >= 0
    with collector_off(), telemetry.PeakMemory() as span:
        block = touched(50 * MB)
    assert span.growth_bytes >= 45 * MB
    assert span.peak_bytes >= span.growth_bytes
    block.close()


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK),
                    reason="needs Linux's resettable peak RSS")
def test_peak_memory_sees_an_allocation_freed_within_the_span():
    """The span's peak covers the resident set at its highest, after the memory is freed.

    The block is a fresh mapping (``touched``), so it grows the resident set by its size.
    (With ``np.empty``'s block it grew by 11 MB only, late in a fresh-clone run's worker,
    and the test skipped there.)"""
    with collector_off(), telemetry.PeakMemory() as span:
        before = telemetry.host_rss()
        block = touched(50 * MB)
        grew = telemetry.host_rss() - before
        block.close()
    assert grew >= 45 * MB, f"the block grew the resident set by {grew / MB:.0f} MB"
    assert span.growth_bytes >= grew - MB
