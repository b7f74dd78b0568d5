"""Horizontal fusion: fused members match their plain, alone-trained selves to float32."""

from __future__ import annotations

import json
import logging

import keras
import numpy as np
import pytest

from packexp.app.main import run
from packexp.data import synthetic
from packexp.models import mlp3
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.data import Preprocessing
from packexp.packing.program import why_not_fused
from packexp.space import Trial
from packexp.space.options import PackSettings, member_key
from packexp.testing.config import compose_config
from packexp.testing.members import CONFIGS, assert_same_weights, members, trial
from packexp.testing.models import every_layer_cnn

pytestmark = pytest.mark.tf

RTOL, ATOL = 1e-4, 1e-5


def train(digits_data, configs, epochs, fusion, **kw):
    ms = members(digits_data, configs, **kw)
    pack = Pack(ms, digits_data, PackSettings(fusion=fusion, jit_compile=False, chunk_steps=50))
    stats = pack.train({m.trial_id: m.steps_for(epochs) for m in ms})
    return ms, pack.evaluate(), stats


def assert_close(a: Member, b: Member) -> None:
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_allclose(wa, wb, rtol=RTOL, atol=ATOL)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_allclose(va.numpy(), vb.numpy(), rtol=RTOL, atol=ATOL)


def test_fused_members_match_each_trained_alone(digits_data):
    """Isolation in fused mode: a member in a fused pack ends as it does fused alone."""
    configs = list(enumerate(CONFIGS))  # four optimizers, activations, lrs and batch sizes
    fused, fused_eval, stats = train(digits_data, configs, 3, "auto")
    assert stats.fused and stats.members == 4
    for m, config in zip(fused, configs, strict=True):
        [alone], alone_eval, alone_stats = train(digits_data, [config], 3, "on")
        assert alone_stats.fused
        assert m.step == alone.step == m.steps_for(3)
        assert_close(m, alone)
        assert fused_eval[m.trial_id].val_loss == pytest.approx(
            alone_eval[m.trial_id].val_loss, rel=1e-4)


def test_fused_training_matches_plain_training(digits_data):
    """Fused and plain kernels differ, so results agree to float32 tolerance, not bits.

    Adam is left out of the multi-epoch check: where a gradient is near zero its update
    m / (sqrt(v) + eps) turns a rounding difference between a batched and a plain matmul
    into a full step of either sign, so two correct kernels drift apart chaotically
    (about 1e-3 after 50 steps here). Fused-alone and fused-packed Adam members stay
    identical (above); Adam's fused update rule itself is checked over a few steps below.
    """
    configs = [(1, CONFIGS[1]), (2, CONFIGS[2]), (3, CONFIGS[3]),
               (4, (25, "momentum", 1e-3, "sigmoid")), (5, (60, "adagrad", 0.1, "relu"))]
    fused, fused_eval, stats = train(digits_data, configs, 3, "auto")
    assert stats.fused
    for m, config in zip(fused, configs, strict=True):
        [plain], plain_eval, plain_stats = train(digits_data, [config], 3, "off")
        assert not plain_stats.fused
        assert_close(m, plain)
        assert fused_eval[m.trial_id].val_loss == pytest.approx(
            plain_eval[m.trial_id].val_loss, rel=1e-4)


def test_fused_adam_follows_keras_adam(digits_data):
    configs = [(0, CONFIGS[0]), (6, (45, "adam", 1e-2, "tanh"))]
    ms = members(digits_data, configs)
    Pack(ms, digits_data,
         PackSettings(fusion="auto", jit_compile=False)).train({m.trial_id: 5 for m in ms})
    for m, config in zip(ms, configs, strict=True):
        [plain] = members(digits_data, [config])
        Pack([plain], digits_data,
             PackSettings(fusion="off", jit_compile=False)).train({plain.trial_id: 5})
        assert_close(m, plain)


def test_a_single_member_fuses_only_when_forced(digits_data):
    """Under auto a pack of one trains plain (fusing one member only adds cost);
    ``on`` fuses it, which the isolation tests above rely on."""
    [m] = members(digits_data, [(0, CONFIGS[0])])
    assert "nothing to fuse" in why_not_fused([m], "gather", "auto")
    assert not Pack([m], digits_data, PackSettings(fusion="auto")).fused
    assert Pack([m], digits_data, PackSettings(fusion="on")).fused


@pytest.mark.parametrize("fusion", ["auto", "off"])
def test_auto_xla_compiles_dense_packs_to_float_rounding(digits_data, fusion):
    """``jit_compile=auto``: XLA for every Dense pack, fused or plain (one compile serves
    the search), with batches padded to the bucket; the same results to float32 rounding
    as the uncompiled pack of unpadded batches."""
    configs = list(enumerate(CONFIGS))
    runs = {}
    for jit in ("auto", False):
        ms = members(digits_data, configs)
        stats = Pack(ms, digits_data,
                     PackSettings(fusion=fusion, jit_compile=jit, chunk_steps=30),
                                  batch_bucket=80).train({m.trial_id: 45 for m in ms})
        runs[jit] = ms, stats
    assert runs["auto"][1].xla and not runs[False][1].xla
    assert runs["auto"][1].fused == runs[False][1].fused == (fusion == "auto")
    for a, b in zip(runs["auto"][0], runs[False][0], strict=True):
        assert_close(a, b)


@pytest.mark.parametrize(("misaligned", "sharing", "xla"), [
    ("mask", "gather", True), ("switch", "gather", False), ("mask", "slice", False)])
def test_auto_xla_compiles_only_where_one_program_serves_the_pack(digits_data, misaligned, sharing,
                                                                  xla):
    """Switching rebuilds the step whenever a member finishes and slicing cuts batches at
    traced sizes: under auto neither compiles (each rebuild would be an XLA compile), nor
    does the cache bucket their packs."""
    from packexp.packing.cache import PackCache

    ms = members(digits_data, list(enumerate(CONFIGS[:2])))
    pack = Pack(ms, digits_data,
                PackSettings(fusion="off", jit_compile="auto", misaligned=misaligned,
                             data_sharing=sharing))
    assert pack.jit_compile is xla
    options = {"jit_compile": "auto", "batch_bucket": 80, "misaligned": misaligned,
               "data_sharing": sharing}
    cache = PackCache(lambda t: None, digits_data, options)  # builds nothing: no template
    cache._convolutional = False
    assert cache.bucketed is xla


def test_auto_xla_leaves_cnn_packs_uncompiled(digits_data):
    images = DeviceData(synthetic.load(shape=[12, 12, 3], num_classes=3, train_size=60,
                                       val_size=10))
    ds = images.dataset
    ms = [Member.create(trial(i, *c), every_layer_cnn, ds.input_shape, ds.num_classes,
                        images.train_size) for i, c in enumerate(CONFIGS[:2])]
    stats = Pack(ms, images,
                 PackSettings(fusion="off", jit_compile="auto")).train({m.trial_id: 2 for m in ms})
    assert not stats.xla


def test_fusion_off_forces_the_plain_pack(digits_data):
    _, _, stats = train(digits_data, list(enumerate(CONFIGS[:2])), 0.2, "off")
    assert not stats.fused


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [({"data_sharing": "slice"}, "gather"),
     ({"width_of_second": 16}, "shapes differ"),
     ({"preprocessing": Preprocessing(flip=True)}, "augments")])
def test_packs_that_cannot_fuse_say_why(kwargs, reason):
    images = DeviceData(synthetic.load(shape=[6, 6, 1], num_classes=3, train_size=120,
                                       val_size=30))
    ms = members(images, list(enumerate(CONFIGS[:2])),
                 preprocessing=kwargs.get("preprocessing"))
    if "width_of_second" in kwargs:
        ms[1] = members(images, [(1, CONFIGS[1])], width=16)[0]
    assert reason in why_not_fused(ms, kwargs.get("data_sharing", "gather"))
    pack = Pack(ms, images,
                PackSettings(fusion="auto", data_sharing=kwargs.get("data_sharing", "gather")))
    assert not pack.fused


def test_misaligned_budgets_leave_finished_members_untouched(digits_data):
    configs = list(enumerate(CONFIGS[:2]))
    ms = members(digits_data, configs)
    Pack(ms, digits_data, PackSettings(fusion="auto", jit_compile=False, chunk_steps=7)).train(
        {"t0": 5, "t1": 30})
    assert (ms[0].step, ms[1].step) == (5, 30)
    alone = members(digits_data, configs[:1])
    Pack(alone, digits_data, PackSettings(fusion="on", jit_compile=False)).train({"t0": 5})
    assert_close(ms[0], alone[0])


def test_a_fused_member_frees_to_a_plain_checkpoint(digits_data, tmp_path):
    configs = list(enumerate(CONFIGS[:3]))
    ms = members(digits_data, configs)
    pack = Pack(ms, digits_data, PackSettings(fusion="auto", jit_compile=False))
    pack.train({m.trial_id: 20 for m in ms})
    path = pack.free("t1", tmp_path)
    [restored] = members(digits_data, [configs[1]])
    restored.restore(path)
    assert restored.step == 20
    next_pack = Pack([restored], digits_data, PackSettings(fusion="off", jit_compile=False))
    next_pack.train({"t1": 15})
    [straight] = members(digits_data, [configs[1]])
    Pack([straight], digits_data, PackSettings(fusion="off", jit_compile=False)).train({"t1": 35})
    assert_close(restored, straight)


def test_a_diverging_member_fails_without_disturbing_fused_mates(digits_data):
    boom = (30, "sgd", 1e12, "relu")
    configs = [(0, CONFIGS[0]), (9, boom), (3, CONFIGS[3])]
    ms, evaluation, stats = train(digits_data, configs, 1, "auto")
    assert stats.fused and ms[1].failed and evaluation["t9"].val_accuracy is None
    for m, config in ((ms[0], configs[0]), (ms[2], configs[2])):
        assert not m.failed
        [alone], _, _ = train(digits_data, [config], 1, "on")
        assert_close(m, alone)


def test_hyperband_scores_agree_fused_and_plain(tmp_path):
    def scores(fusion):
        # Adam's chaotic sensitivity to kernel rounding is covered above; the search space
        # here holds the other three optimizers.
        cfg = compose_config(["experiment=quick", "scheduler.R=9", f"pack.fusion={fusion}",
                              "search_space.params.optimizer=[sgd,momentum,adagrad]"])
        run(cfg, run_dir=tmp_path / fusion)
        results = json.loads((tmp_path / fusion / "results.json").read_text())
        return results, {t["trial_id"]: [(r["rung"], r["val_accuracy"], r["val_loss"])
                                         for r in t["rungs"]] for t in results["trials"]}

    fused_results, fused = scores("auto")
    plain_results, plain = scores("off")
    assert any(p.get("fused") for p in fused_results["packs"])
    assert not any(p.get("fused") for p in plain_results["packs"])
    assert fused.keys() == plain.keys()
    acc_gap, loss_gap = [], []
    for trial_id, rungs in fused.items():
        for (rung, acc, loss), (rung2, acc2, loss2) in zip(rungs, plain[trial_id], strict=True):
            assert rung == rung2
            assert (acc is None) == (acc2 is None)
            if acc is not None:
                acc_gap.append(abs(acc - acc2))
                loss_gap.append(abs(loss - loss2) / loss2)
    # Most trials agree to rounding; a few high-learning-rate ones amplify it over nine
    # epochs (measured: 10 of 360 validation examples at worst).
    assert np.median(loss_gap) < 1e-4
    assert max(acc_gap) <= 0.05, max(acc_gap)
    assert fused_results["best"]["trial_id"] == plain_results["best"]["trial_id"]


class Scale(keras.layers.Layer):
    """A user's own layer: a learned scale per feature, with no fused form."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.scale


def with_custom_layer(input_shape, num_classes, hparams) -> keras.Model:
    return keras.Sequential([keras.Input(tuple(input_shape)),
                             keras.layers.Dense(16, activation=hparams["activation"]),
                             Scale(name="my_scale"), keras.layers.Dense(num_classes)])


def plain_and_alone(digits_data, pack_members, make) -> None:
    """Each member of the plain pack ends bit for bit as its twin ``make(member)`` trained
    alone for as many steps."""
    for m in pack_members:
        alone = make(m)
        Pack([alone], digits_data, PackSettings(fusion="off", jit_compile=False)).train(
            {alone.trial_id: m.step})
        assert alone.step == m.step > 0
        assert_same_weights(m, alone)


@pytest.mark.parametrize("fusion", ["auto", "on"])
def test_a_custom_layer_keeps_the_pack_plain_exact_and_named_in_the_log(digits_data, fusion,
                                                                        caplog):
    ds = digits_data.dataset

    def make(t: Trial) -> Member:
        return Member.create(t, with_custom_layer, ds.input_shape, ds.num_classes,
                             digits_data.train_size)

    ms = [make(trial(i, *c)) for i, c in enumerate(CONFIGS[:2])]
    with caplog.at_level(logging.INFO, logger="packexp.packing.pack"):
        stats = Pack(ms, digits_data,
                     PackSettings(fusion=fusion, jit_compile=False, chunk_steps=50)).train(
            {m.trial_id: m.steps_for(1) for m in ms})
    assert not stats.fused
    assert "pack of 2 trains unfused: layer my_scale (Scale) has no fused form" in caplog.text
    plain_and_alone(digits_data, ms, lambda m: make(m.trial))


def test_members_of_different_widths_pack_plainly_and_each_as_alone(digits_data, caplog):
    """A model hyper-parameter (mlp3's width from the search space) is part of a member's
    structure; fusion takes members of one shape only, so the pack trains plain."""
    ds = digits_data.dataset

    def make(i: int, width: int) -> Member:
        t = trial(i, *CONFIGS[i])
        t = Trial(t.trial_id, {**t.hparams, "width": width}, (), seed=t.seed)
        return Member.create(t, mlp3.build, ds.input_shape, ds.num_classes, digits_data.train_size)

    ms = [make(0, 16), make(1, 32)]
    assert [m.model.layers[0].units for m in ms] == [16, 32]
    assert member_key(ms[0].trial) != member_key(ms[1].trial)
    with caplog.at_level(logging.INFO, logger="packexp.packing.pack"):
        stats = Pack(ms, digits_data,
                     PackSettings(fusion="auto", jit_compile=False, chunk_steps=50)).train(
            {m.trial_id: m.steps_for(1) for m in ms})
    assert not stats.fused and "shapes differ" in caplog.text
    plain_and_alone(digits_data, ms, lambda m: make(int(m.trial_id[1:]), m.trial.hparams["width"]))
