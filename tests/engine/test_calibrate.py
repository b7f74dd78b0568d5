"""strategy=cost's calibration on a real device: what it measures for a model."""

from __future__ import annotations

import functools

import pytest

from packexp import telemetry
from packexp.data import synthetic
from packexp.models import mlp3
from packexp.packing import DeviceData, Member
from packexp.packing.cache import PackCache
from packexp.packing.calibrate import calibrate
from packexp.testing.models import mlp_with_dropout, small_cnn

pytestmark = pytest.mark.tf


def test_a_model_that_cannot_fuse_is_calibrated_as_plain_packs():
    """A user's model with a layer of no fused form (Dropout) is measured plain only."""
    data = DeviceData(synthetic.load(shape=[12], num_classes=4, train_size=300, val_size=64))
    ds = data.dataset

    def make_member(t):
        return Member.create(t, mlp_with_dropout, ds.input_shape, ds.num_classes,
                             data.train_size)

    options = {"fusion": "auto", "misaligned": "mask", "data_sharing": "gather",
               "grouped_conv": "auto", "jit_compile": "auto", "chunk_steps": 50,
               "eval_batch_size": 1024}
    record = calibrate(PackCache(make_member, data, options, keep=8),
                       {"batch_size": 20, "optimizer": "sgd", "learning_rate": 0.1,
                        "activation": "relu"}, [20, 40], 2, lambda group: True, 100)
    assert record["settings"]["fusable"] is False
    assert {p["fusion"] for p in record["packs"]} == {"off"}
    assert max(len(p["batches"]) for p in record["packs"]) == 2


def test_compiled_plain_packs_are_measured_at_one_member_and_the_largest_bucket():
    """Where packs compile (XLA, batches padded to the bucket) and train plain
    (``pack.fusion=off``), one program serves each member-count bucket: the calibration
    measures the single member and the largest bucket, both plain."""
    data = DeviceData(synthetic.load(shape=[12], num_classes=4, train_size=300, val_size=64))
    ds = data.dataset
    build = functools.partial(mlp3.build, width=16)

    def make_member(t):
        return Member.create(t, build, ds.input_shape, ds.num_classes, data.train_size)

    options = {"fusion": "off", "misaligned": "mask", "data_sharing": "gather",
               "grouped_conv": "auto", "jit_compile": "auto", "chunk_steps": 50,
               "eval_batch_size": 1024, "batch_bucket": 40}  # a search's: its largest batch
    hparams = {"batch_size": 20, "optimizer": "sgd", "learning_rate": 0.1, "activation": "relu"}
    # A search's cache is made with a configuration of its space (its template), so it
    # knows whether its packs compile before the first is measured.
    cache = PackCache(make_member, data, options, keep=8, template=hparams)
    record = calibrate(cache, hparams, [20, 40], 4, lambda group: True, 100)
    assert cache.bucketed
    assert {p["fusion"] for p in record["packs"]} == {"off"}
    assert sorted(len(p["batches"]) for p in record["packs"]) == [1, 4]
    assert record["settings"]["batch_bucket"] == 40


@pytest.mark.parametrize("fusion", ["auto", "on"])
def test_cnn_fused_packs_are_measured_only_where_the_run_would_fuse_them(fusion):
    """Under ``auto`` a CPU trains CNN packs plain (looped): the calibration measures no
    fused pack there; ``pack.fusion=on`` fuses them, so it measures them."""
    data = DeviceData(synthetic.load(shape=[8, 8, 1], num_classes=3, train_size=64,
                                     val_size=16))
    ds = data.dataset

    def make_member(t):
        return Member.create(t, small_cnn, ds.input_shape, ds.num_classes, data.train_size)

    options = {"fusion": fusion, "misaligned": "mask", "data_sharing": "gather",
               "grouped_conv": "auto", "jit_compile": "auto", "chunk_steps": 50,
               "eval_batch_size": 1024}
    record = calibrate(PackCache(make_member, data, options, keep=8),
                       {"batch_size": 8, "optimizer": "adam", "learning_rate": 0.01,
                        "activation": "relu"}, [4, 8], 2, lambda group: True, 100)
    fused_here = fusion == "on" or telemetry.gpu_device() is not None
    assert record["settings"]["fusable"] is True
    assert {p["fusion"] for p in record["packs"]} == ({"off", "on"} if fused_here else {"off"})
    assert record["settings"]["looped"] is True


def cnn_calibration(limit_s: float) -> tuple[dict, PackCache]:
    data = DeviceData(synthetic.load(shape=[8, 8, 1], num_classes=3, train_size=256,
                                     val_size=16))
    ds = data.dataset

    def make_member(t):
        return Member.create(t, small_cnn, ds.input_shape, ds.num_classes, data.train_size)

    options = {"fusion": "auto", "misaligned": "mask", "data_sharing": "gather",
               "grouped_conv": "auto", "jit_compile": "auto", "chunk_steps": 50,
               "eval_batch_size": 1024}
    cache = PackCache(make_member, data, options, keep=8)
    return calibrate(cache, {"batch_size": 8, "optimizer": "adam", "learning_rate": 0.01,
                             "activation": "relu"}, [4, 6, 8], 4, lambda group: True, 100,
                     limit_s=limit_s), cache


def test_a_cnn_measures_a_single_and_a_pair_first_and_nothing_new_past_its_limit(monkeypatch):
    """A CNN's slow steps: its single and a pair come first, the larger packs only within
    the limit; with no time for a pair, the record is a fallback that says why: before
    measuring, where a build says the first pack's set-up alone would pass the limit."""
    import re

    from packexp.packing import calibrate as module

    whole, _ = cnn_calibration(limit_s=600)
    assert [p["batches"] for p in whole["packs"]][:2] == [[6], [6, 6]]
    # Two cycles of 12 steps, not five whole epochs (32 steps at batch 8).
    assert [c["steps"] for c in whole["cycles"]] == [[12], [12]]
    before, _ = cnn_calibration(limit_s=1e-9)
    assert before["fallback"] == "knn" and set(before) == {"fallback", "why", "seconds"}
    assert re.fullmatch(r"a member took \d+\.\d s to build, so its first pack's set-up would "
                        r"take about \d+ s, over half the 1e-09 s a calibration may take",
                        before["why"]), before["why"]
    monkeypatch.setattr(module, "SETUP_PER_BUILD", 0)  # the build says nothing: measure
    cut, _ = cnn_calibration(limit_s=1e-9)
    assert re.fullmatch(r"measuring 0 singles took \d+\.\d s, and a pack of two would take "
                        r"it past the 1e-09 s a calibration may take", cut["why"])
