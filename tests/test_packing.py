"""The isolation invariant: a member trained in a pack ends exactly as trained alone."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from packexp.data import synthetic
from packexp.models import mlp3
from packexp.packing import DeviceData, Member, Pack, batch_indices
from packexp.search_space import Trial, derive_seed

CONFIGS = [  # (batch_size, optimizer, learning_rate, activation)
    (20, "adam", 1e-3, "relu"),
    (45, "momentum", 1e-2, "tanh"),
    (70, "adagrad", 1e-2, "sigmoid"),
    (32, "sgd", 1e-1, "leaky_relu"),
]


@pytest.fixture(scope="module")
def data() -> DeviceData:
    return DeviceData(synthetic.load(shape=[12], num_classes=4, train_size=300, val_size=64))


@pytest.fixture(scope="module")
def image_data() -> DeviceData:
    return DeviceData(synthetic.load(shape=[6, 6, 2], num_classes=3, train_size=200,
                                     val_size=40))


def trial(i: int, batch: int, opt: str, lr: float, act: str) -> Trial:
    hp = {"batch_size": batch, "optimizer": opt, "learning_rate": lr, "activation": act}
    return Trial(f"t{i}", hp, (), seed=derive_seed(11, i))


def members(data: DeviceData, configs) -> list[Member]:
    build = functools.partial(mlp3.build, width=16)
    ds = data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes, data.train_size)
            for i, c in configs]


def train(data, configs, epochs: float, **pack_kw) -> tuple[list[Member], dict]:
    ms = members(data, configs)
    pack = Pack(ms, data, **pack_kw)
    pack.train({m.trial_id: m.steps_for(epochs) for m in ms})
    return ms, pack.evaluate()


def assert_same_weights(a: Member, b: Member) -> None:
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


@pytest.mark.parametrize("misaligned", ["mask", "switch"])
def test_packed_equals_alone(data, misaligned):
    configs = list(enumerate(CONFIGS))
    packed, packed_eval = train(data, configs, epochs=3, misaligned=misaligned, chunk_steps=7)
    steps = [m.step for m in packed]
    assert len(set(steps)) == len(steps), "members must have misaligned step counts"
    for m in packed:
        [alone], alone_eval = train(data, [(int(m.trial_id[1:]), CONFIGS[int(m.trial_id[1:])])],
                                    epochs=3)
        assert alone.step == m.step == m.steps_for(3)
        assert_same_weights(alone, m)
        assert alone_eval[m.trial_id] == packed_eval[m.trial_id]


def test_pack_mates_do_not_matter(data):
    """The same member beside different pack-mates ends identically."""
    a, _ = train(data, [(0, CONFIGS[0]), (1, CONFIGS[1])], epochs=2)
    b, _ = train(data, [(2, CONFIGS[2]), (0, CONFIGS[0]), (3, CONFIGS[3])], epochs=2)
    assert_same_weights(a[0], b[1])


def test_switch_mode_measures_its_rebuilds(data):
    ms = members(data, list(enumerate(CONFIGS[:3])))
    stats = Pack(ms, data, misaligned="switch").train({m.trial_id: m.steps_for(1) for m in ms})
    assert stats.switches == 2  # three distinct budgets: two members leave before the last
    assert stats.switch_overhead_s > 0
    ms = members(data, list(enumerate(CONFIGS[:3])))
    stats = Pack(ms, data, misaligned="mask").train({m.trial_id: m.steps_for(1) for m in ms})
    assert stats.switches == 0
    assert stats.steps == max(m.steps_for(1) for m in ms)


def test_continuing_equals_training_straight_through(data):
    [straight], _ = train(data, [(0, CONFIGS[0])], epochs=2)
    [m] = members(data, [(0, CONFIGS[0])])
    pack = Pack([m], data)
    pack.train({m.trial_id: 5})
    pack.train({m.trial_id: m.steps_for(2) - 5})
    assert_same_weights(straight, m)


def test_images_are_gathered_and_scaled_on_the_device(image_data):
    configs = list(enumerate(CONFIGS[:2]))
    packed, packed_eval = train(image_data, configs, epochs=1)
    [alone], _ = train(image_data, configs[1:], epochs=1)
    assert_same_weights(alone, packed[1])
    assert all(0 <= e.val_accuracy <= 1 for e in packed_eval.values())


def test_a_diverging_member_fails_alone(data):
    boom = (30, "sgd", 1e12, "relu")
    configs = [(0, CONFIGS[0]), (9, boom), (1, CONFIGS[1])]
    packed, evaluation = train(data, configs, epochs=2, chunk_steps=4)
    assert packed[1].failed
    assert evaluation["t9"].val_accuracy is None
    for m in (packed[0], packed[2]):
        assert not m.failed
        [alone], alone_eval = train(data, [(int(m.trial_id[1:]), CONFIGS[int(m.trial_id[1:])])],
                                    epochs=2)
        assert_same_weights(alone, m)
        assert alone_eval[m.trial_id] == evaluation[m.trial_id]


def test_sigmoid_with_lr_0_1_does_not_disturb_pack_mates(data):
    configs = [(0, CONFIGS[0]), (5, (20, "adam", 0.1, "sigmoid"))]
    packed, _ = train(data, configs, epochs=2)
    [alone], _ = train(data, configs[:1], epochs=2)
    assert_same_weights(alone, packed[0])


def test_batch_indices_walk_a_fresh_permutation_each_epoch():
    idx = batch_indices(seed=3, n=50, batch_size=10, start=0, steps=10)
    assert idx.shape == (10, 10)
    assert sorted(idx[:5].ravel()) == list(range(50))
    assert sorted(idx[5:].ravel()) == list(range(50))
    assert not np.array_equal(idx[:5], idx[5:])
    np.testing.assert_array_equal(batch_indices(3, 50, 10, 3, 4), idx[3:7])


def test_batch_indices_drop_the_remainder():
    idx = batch_indices(seed=0, n=25, batch_size=10, start=0, steps=4)
    assert len(set(idx[:2].ravel())) == 20
    assert len(set(idx[2:].ravel())) == 20


def test_member_rejects_a_batch_larger_than_the_data(data):
    with pytest.raises(ValueError, match="batch_size=1000"):
        members(data, [(0, (1000, "sgd", 0.1, "relu"))])


def test_unknown_misaligned_mode(data):
    with pytest.raises(ValueError, match="misaligned='pad'"):
        Pack(members(data, [(0, CONFIGS[0])]), data, misaligned="pad")
