"""Learning-rate schedules and optimizer arguments as hyper-parameters: each member's rate is
a function of its own step, so packing, fusing and continuing from a checkpoint keep it."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from packexp.data import digits
from packexp.models import mlp3
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.member import read_state, write_state
from packexp.packing.program import why_not_fused
from packexp.packing.schedules import profile
from packexp.schedulers import Hyperband
from packexp.space import Trial, derive_seed
from packexp.space.options import LR_SCHEDULES, PackSettings, why_not_fusable
from packexp.testing.members import make_cache

pytestmark = pytest.mark.tf

RTOL, ATOL = 1e-4, 1e-5


def trial(i: int, **hparams) -> Trial:
    hp = {"batch_size": 30, "optimizer": "momentum", "learning_rate": 0.05,
          "activation": "relu", **hparams}
    return Trial(f"t{i}", hp, (), seed=derive_seed(5, i))


def build(digits_data, trials) -> list[Member]:
    ds = digits_data.dataset
    make = functools.partial(mlp3.build, width=16)
    return [Member.create(t, make, ds.input_shape, ds.num_classes, digits_data.train_size)
            for t in trials]


def trained(digits_data, trials, steps, horizon, fusion="off") -> list[Member]:
    ms = build(digits_data, trials)
    for m in ms:
        m.set_lr_horizon(horizon)
    pack = Pack(ms, digits_data, PackSettings(fusion=fusion, jit_compile=False, chunk_steps=7))
    pack.train({m.trial_id: steps for m in ms})
    assert pack.fused == (fusion == "on")
    return ms


def assert_same(a: Member, b: Member, exact: bool = True) -> None:
    pairs = [*zip(a.model.get_weights(), b.model.get_weights(), strict=True),
             *((x.numpy(), y.numpy()) for x, y in
               zip(a.optimizer.variables, b.optimizer.variables, strict=True))]
    for x, y in pairs:
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("z, expected", [
    (0.0, {"constant": 1, "step": 1, "linear": 1, "cosine": 1, "exponential": 1, "rex": 1}),
    (0.5, {"constant": 1, "step": 0.1, "linear": 0.5, "cosine": 0.5,
           "exponential": 0.1, "rex": 0.5 / 0.75}),
    (0.8, {"constant": 1, "step": 0.01, "linear": 0.2, "cosine": (1 + math.cos(0.8 * math.pi)) / 2,
           "exponential": 0.01 ** 0.8, "rex": 0.2 / 0.6}),
    (1.0, {"constant": 1, "step": 0.01, "linear": 0, "cosine": 0, "exponential": 0.01, "rex": 0}),
])
def test_profiles_by_hand(z, expected):
    assert set(expected) == set(LR_SCHEDULES)
    for name, value in expected.items():
        assert float(profile(name, tf.constant(z))) == pytest.approx(value, abs=1e-6), name


def test_the_rate_follows_the_members_own_step(digits_data):
    [m] = build(digits_data, [trial(0, lr_schedule="linear")])
    m.set_lr_horizon(2.0)  # 2 epochs of 47 steps
    assert m.steps_for(2.0) == 94
    Pack([m], digits_data,
         PackSettings(fusion="off", jit_compile=False, chunk_steps=11)).train({m.trial_id: 47})
    assert float(m.optimizer.iterations.numpy()) == 47
    assert float(m.optimizer.learning_rate) == pytest.approx(0.05 * 0.5, rel=1e-6)
    Pack([m], digits_data, PackSettings(fusion="off", jit_compile=False)).train({m.trial_id: 100})
    assert float(m.optimizer.learning_rate) == 0.0  # past the horizon it stays at 0


@pytest.mark.parametrize("schedule", ["cosine", "rex", "step"])
def test_a_scheduled_member_packed_matches_it_alone(digits_data, schedule):
    """Plain packs: bit for bit, with mates of other schedules, batch sizes and budgets."""
    mates = [trial(1, lr_schedule="constant", batch_size=20),
             trial(2, lr_schedule="exponential", optimizer="adam", learning_rate=0.01)]
    me = trial(0, lr_schedule=schedule)
    packed = trained(digits_data, [me, *mates], 40, horizon=1.0)
    [alone] = trained(digits_data, [me], 40, horizon=1.0)
    assert_same(packed[0], alone)


def test_continuing_from_a_checkpoint_is_training_in_one_go(digits_data, tmp_path):
    me = trial(0, lr_schedule="rex", optimizer="adam", learning_rate=0.01)
    [whole] = trained(digits_data, [me], 30, horizon=1.0)
    [first] = trained(digits_data, [me], 12, horizon=1.0)
    path = first.save(tmp_path)
    [second] = build(digits_data, [me])
    second.load(me, read_state(path), second.preprocessing)
    second.set_lr_horizon(1.0)
    Pack([second], digits_data, PackSettings(fusion="off", jit_compile=False, chunk_steps=7)).train(
        {me.trial_id: 18})
    assert_same(second, whole)
    # the schedule's base rate and horizon are in the checkpoint, beside the optimizer's own
    assert len(read_state(path).slots) == len(whole.optimizer.variables)
    write_state(whole.state(), tmp_path / "again")


def test_fused_schedules_agree_with_plain_to_float_rounding(digits_data):
    trials = [trial(0, lr_schedule="cosine"), trial(1, lr_schedule="rex", batch_size=45),
              trial(2, lr_schedule="constant", optimizer="sgd"),
              trial(3, lr_schedule="linear", optimizer="adagrad", learning_rate=0.02)]
    fused = trained(digits_data, trials, 25, horizon=0.5, fusion="on")
    for m, t in zip(fused, trials, strict=True):
        [plain] = trained(digits_data, [t], 25, horizon=0.5)
        assert_same(m, plain, exact=False)
        assert float(m.optimizer.learning_rate) == pytest.approx(
            float(plain.optimizer.learning_rate), rel=1e-6)


def test_optimizer_arguments_reach_the_optimizer(digits_data):
    [adam, rms, sgd] = build(digits_data, [
        trial(0, optimizer="adam", beta_1=0.8, beta_2=0.99, momentum=0.5),
        trial(1, optimizer="rmsprop", momentum=0.5, rho=0.8),
        trial(2, optimizer="momentum", momentum=0.5)])
    assert (adam.optimizer.beta_1, adam.optimizer.beta_2) == (0.8, 0.99)
    assert not hasattr(adam.optimizer, "momentum")  # not Adam's argument: not its business
    assert (rms.optimizer.momentum, rms.optimizer.rho) == (0.5, 0.8)
    assert sgd.optimizer.momentum == 0.5  # over the paper's 0.9


def test_fused_packs_take_their_members_own_betas_and_momentum(digits_data):
    trials = [trial(0, optimizer="adam", learning_rate=0.01, beta_1=0.8),
              trial(1, optimizer="adam", learning_rate=0.01, beta_1=0.95, epsilon=1e-4),
              trial(2, optimizer="momentum", momentum=0.5)]
    fused = trained(digits_data, trials, 10, horizon=1.0, fusion="on")
    for m, t in zip(fused, trials, strict=True):
        [plain] = trained(digits_data, [t], 10, horizon=1.0)
        assert_same(m, plain, exact=False)


def test_weight_decay_makes_a_pack_plain_and_the_log_names_the_member(digits_data):
    trials = [trial(0, optimizer="adam", weight_decay=0.01), trial(1, optimizer="adam")]
    ms = build(digits_data, trials)
    assert why_not_fusable(trials[0].hparams) == (
        "weight_decay=0.01 has no fused update rule (adam applies it)")
    assert why_not_fusable(trials[1].hparams) is None
    assert why_not_fused(ms, "gather", "auto") == (
        "member t0: weight_decay=0.01 has no fused update rule (adam applies it)")
    packed = trained(digits_data, trials, 20, horizon=1.0, fusion="auto")
    [alone] = trained(digits_data, trials[:1], 20, horizon=1.0)
    assert_same(packed[0], alone)


def test_hyperband_validates_the_horizon():
    assert Hyperband(9).horizon_epochs is None  # each rung's own budget
    assert Hyperband(9, lr_horizon="trial").horizon_epochs == 9.0
    with pytest.raises(ValueError, match="lr_horizon='budget'"):
        Hyperband(9, lr_horizon="budget")


@pytest.mark.parametrize("fusion, lr_horizon", [("off", None), ("off", 2.5), ("on", None)])
def test_a_reused_pack_of_scheduled_members_ends_where_a_fresh_one_does(fusion, lr_horizon):
    """A kept pack takes new trials' base rates and each rung's horizon as variable values."""
    from packexp.packing.trainer import train_group

    small = DeviceData(digits.load())
    shapes = [("cosine", "momentum"), ("rex", "adam"), ("constant", "sgd")]
    first = [trial(i, lr_schedule=s, optimizer=o, batch_size=20 + 10 * i, learning_rate=0.01)
             for i, (s, o) in enumerate(shapes)]
    second = [trial(10 + i, lr_schedule=s, optimizer=o, batch_size=60 - 10 * i,
                    learning_rate=0.03) for i, (s, o) in enumerate(shapes)]

    def search(keep):
        cache = make_cache(small, keep=keep, fusion=fusion, jit_compile=False)
        states, out = {}, {}
        for rung, epochs in enumerate((0.3, 0.9)):
            for group in (first, second):
                [run] = train_group(group, cache, epochs,
                                    {t.trial_id: states.get(t.trial_id) for t in group},
                                    lr_horizon=lr_horizon)
                assert run.stats.fused == (fusion == "on")
                for m in run.members:
                    states[m.trial_id] = m.state
                    out[m.trial_id, rung] = (m.state, run.reused)
        return out

    reused, fresh = search(keep=8), search(keep=0)
    assert reused["t10", 0][1] and not fresh["t10", 0][1]
    for key, (a, _) in reused.items():
        b = fresh[key][0]
        for x, y in zip(a.weights + a.slots, b.weights + b.slots, strict=True):
            if fusion == "off":
                np.testing.assert_array_equal(x, y, err_msg=str(key))
            else:
                np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=str(key))
