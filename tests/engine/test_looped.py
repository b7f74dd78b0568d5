"""Looped packs: one program per architecture, members bit for bit as alone."""

from __future__ import annotations

import functools
import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from packexp.app.main import run
from packexp.models import mobilenet
from packexp.packing import Member, Pack, looped
from packexp.packing.data import Preprocessing
from packexp.space import Trial, derive_seed
from packexp.space.options import PackSettings
from packexp.testing.config import compose_config
from packexp.testing.models import small_cnn

pytestmark = pytest.mark.tf


MOBILENET = functools.partial(mobilenet.build, alpha=0.35, bn_momentum=0.7)
# The isolation checks run on a small CNN with BatchNorm in make test, and on MobileNetV2
# (minutes on a CPU) in make test-paper-cnns.
BUILDS = [pytest.param(small_cnn, id="small_cnn"),
          pytest.param(MOBILENET, id="mobilenet", marks=pytest.mark.paper_cnns)]
TRIALS = [  # misaligned batch sizes and budgets, every update rule, activation and a schedule
    Trial(f"t{i}", {"batch_size": b, "optimizer": o, "learning_rate": lr, "activation": a,
                    **extra}, (), seed=derive_seed(5, i))
    for i, (b, o, lr, a, extra) in enumerate([
        (8, "adam", 1e-3, "relu", {}),
        (12, "momentum", 1e-2, "tanh", {"lr_schedule": "cosine"}),
        (5, "adagrad", 1e-2, "sigmoid", {}),
        (7, "sgd", 5e-2, "leaky_relu", {"lr_schedule": "step"}),
    ])]


def members(images_data, build, trials, preprocessing=None) -> list[Member]:
    ds = images_data.dataset
    return [Member.create(t, build, ds.input_shape, ds.num_classes, images_data.train_size,
                          preprocessing) for t in trials]


def train(images_data, build, trials, loop="auto", epochs=2, chunk_steps=500, preprocessing=None):
    ms = members(images_data, build, trials, preprocessing)
    for m in ms:
        m.set_lr_horizon(epochs)
    pack = Pack(ms, images_data,
                PackSettings(fusion="off", jit_compile=False, loop=loop, chunk_steps=chunk_steps))
    stats = pack.train({m.trial_id: m.steps_for(epochs) for m in ms})
    return ms, pack.evaluate(), stats


def assert_same_state(a: Member, b: Member) -> None:
    assert a.step == b.step
    for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(x, y)  # BatchNorm's moving statistics included
    for x, y in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("build", BUILDS)
def test_a_looped_pack_ends_bit_for_bit_as_each_member_alone(images_data, build):
    packed, evaluation, stats = train(images_data, build, TRIALS, chunk_steps=7)
    assert stats.looped
    assert len({m.step for m in packed}) == len(packed), "budgets must be misaligned"
    for trial, member in zip(TRIALS, packed, strict=True):
        [alone], alone_evaluation, alone_stats = train(images_data, build, [trial], loop="off")
        assert not alone_stats.looped  # the reference is the unrolled engine
        assert_same_state(alone, member)
        assert alone_evaluation[trial.trial_id] == evaluation[trial.trial_id]
    fresh = members(images_data, build, TRIALS[:1])[0]
    assert not np.array_equal(fresh.model.get_weights()[0], packed[0].model.get_weights()[0])


def test_one_program_serves_packs_of_every_size_activation_optimizer_and_batch_size(images_data):
    looped.PROGRAMS.clear()
    _, _, first = train(images_data, small_cnn, TRIALS[:2])
    assert (first.programs, first.looped) == (1, True) and first.trace_s > 0
    for trials in (TRIALS[1:], TRIALS[3:], TRIALS[::-1]):
        _, _, again = train(images_data, small_cnn, trials)
        assert (again.programs, again.trace_s) == (0, 0.0)
    assert len(looped.PROGRAMS) == 1


@pytest.mark.parametrize("build", BUILDS)
def test_a_reused_program_ends_where_a_fresh_one_does(images_data, build):
    looped.PROGRAMS.clear()
    fresh, fresh_evaluation, stats = train(images_data, build, TRIALS[:3])
    assert stats.programs == 1
    train(images_data, build, TRIALS[3:])  # the program runs other members in between
    reused, reused_evaluation, stats = train(images_data, build, TRIALS[:3])
    assert stats.programs == 0
    for a, b in zip(fresh, reused, strict=True):
        assert_same_state(a, b)
    assert fresh_evaluation == reused_evaluation


def test_padded_rows_change_nothing(images_data):
    """A member's batch is its own rows of the pack's widest: what pads it is never read."""
    ms = members(images_data, small_cnn, TRIALS[:3])
    program, _ = looped.program_for(ms, images_data)
    state = looped.stack_members(ms)
    ks = tf.constant([4, 4, 4])
    widest = max(m.batch_size for m in ms)
    idxs = np.zeros((3, 4, widest), np.int32)
    for i, m in enumerate(ms):
        idxs[i, :, : m.batch_size] = m.next_batches(4)
    garbage = idxs.copy()
    for i, m in enumerate(ms):
        garbage[i, :, m.batch_size:] = np.random.default_rng(i).integers(
            0, images_data.train_size, (4, widest - m.batch_size))
    zeros = tf.zeros([3], tf.int64)
    outs = [program.train(images_data.x_train, images_data.y_train, tf.constant(x), ks, zeros,
                          zeros, state.hparams, state.arrays()) for x in (idxs, garbage)]
    for a, b in zip(tf.nest.flatten(outs[0]), tf.nest.flatten(outs[1]), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(outs[0][1][0][0].numpy(), state.weights[0].numpy())


@pytest.mark.parametrize("other", [
    {"build": functools.partial(small_cnn, filters=6)},
    {"build": functools.partial(small_cnn, momentum=0.9)},
    {"preprocessing": Preprocessing(mean=(0.5,), std=(0.25,))},
], ids=["architecture", "batchnorm", "preprocessing"])
def test_a_kept_program_of_other_settings_is_not_used_but_built_anew(images_data, other):
    looped.PROGRAMS.clear()
    _, _, first = train(images_data, small_cnn, TRIALS[:2])
    _, _, second = train(images_data, other.get("build", small_cnn), TRIALS[:2],
                         preprocessing=other.get("preprocessing"))
    assert (first.programs, second.programs) == (1, 1)
    assert len(looped.PROGRAMS) == 2


def test_members_without_an_update_rule_train_unrolled_and_the_log_says_why(images_data, caplog):
    trials = [Trial("k0", {"batch_size": 6, "optimizer": "rmsprop", "learning_rate": 1e-3,
                           "activation": "relu"}, (), seed=1), TRIALS[0]]
    with caplog.at_level(logging.INFO, logger="packexp.packing.pack"):
        _, evaluation, stats = train(images_data, small_cnn, trials)
    assert not stats.looped and stats.programs == 1
    assert "member k0: its optimizer has no update rule" in caplog.text
    assert all(e.val_accuracy is not None for e in evaluation.values())


@pytest.mark.slow
@pytest.mark.paper_cnns
def test_a_mobilenet_search_traces_one_step_program_for_all_its_packs(tmp_path):
    """A real search: packs of different sizes, activations, optimizers and batch sizes
    (and the memory probe, which traces the program first) share one program, counted once."""
    looped.PROGRAMS.clear()
    cfg = compose_config(["experiment=quick", "model=mobilenet", "dataset=synthetic",
                          "dataset.shape=[8,8,1]", "dataset.num_classes=3",
                          "dataset.train_size=96", "dataset.val_size=24", "scheduler.R=9",
                          "device.probe=true"])
    run(cfg, run_dir=tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    packs = results["packs"]
    assert len(packs) >= 4 and all(p["looped"] for p in packs)
    assert (results["programs"], results["eval_programs"]) == (1, 1)
    assert sum(p["programs"] for p in packs) == 1 and packs[0]["probe_s"] > 0
    hparams = [t["hparams"] for t in results["trials"]]
    for name in ("activation", "optimizer", "batch_size"):
        assert len({h[name] for h in hparams}) > 1, name
