"""The isolation invariant: a member trained in a pack ends exactly as trained alone."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from packexp.data import synthetic
from packexp.models import mlp3
from packexp.packing import DeviceData, Member, Pack, batch_indices
from packexp.packing.data import Preprocessing
from packexp.space.options import PackSettings
from packexp.testing.members import CONFIGS, PLAIN, assert_same_weights, trial
from packexp.testing.models import mlp_with_dropout

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def image_data() -> DeviceData:
    return DeviceData(synthetic.load(shape=[6, 6, 2], num_classes=3, train_size=200,
                                     val_size=40))


def members(features_data: DeviceData, configs) -> list[Member]:
    build = functools.partial(mlp3.build, width=16)
    ds = features_data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          features_data.train_size) for i, c in configs]


def train(features_data, configs, epochs: float, **pack_kw) -> tuple[list[Member], dict]:
    ms = members(features_data, configs)
    pack = Pack(ms, features_data, PackSettings(**{**PLAIN, **pack_kw}))
    pack.train({m.trial_id: m.steps_for(epochs) for m in ms})
    return ms, pack.evaluate()


@pytest.mark.parametrize("misaligned", ["mask", "switch"])
def test_packed_equals_alone(features_data, misaligned):
    configs = list(enumerate(CONFIGS))
    packed, packed_eval = train(features_data, configs, epochs=3, misaligned=misaligned,
                                chunk_steps=7)
    steps = [m.step for m in packed]
    assert len(set(steps)) == len(steps), "members must have misaligned step counts"
    for m in packed:
        i = int(m.trial_id[1:])
        [alone], alone_eval = train(features_data, [(i, CONFIGS[i])], epochs=3)
        assert alone.step == m.step == m.steps_for(3)
        assert_same_weights(alone, m)
        assert alone_eval[m.trial_id] == packed_eval[m.trial_id]


def test_pack_mates_do_not_matter(features_data):
    """The same member beside different pack-mates ends identically."""
    a, _ = train(features_data, [(0, CONFIGS[0]), (1, CONFIGS[1])], epochs=2)
    b, _ = train(features_data, [(2, CONFIGS[2]), (0, CONFIGS[0]), (3, CONFIGS[3])], epochs=2)
    assert_same_weights(a[0], b[1])


def test_switch_mode_measures_its_rebuilds(features_data):
    ms = members(features_data, list(enumerate(CONFIGS[:3])))
    stats = Pack(ms, features_data, PackSettings(**PLAIN, misaligned="switch")).train(
        {m.trial_id: m.steps_for(1) for m in ms})
    assert stats.switches == 2  # three distinct budgets: two members leave before the last
    assert stats.switch_overhead_s > 0
    ms = members(features_data, list(enumerate(CONFIGS[:3])))
    stats = Pack(ms, features_data, PackSettings(**PLAIN, misaligned="mask")).train(
        {m.trial_id: m.steps_for(1) for m in ms})
    assert stats.switches == 0
    assert stats.steps == max(m.steps_for(1) for m in ms)


def test_continuing_equals_training_straight_through(features_data):
    [straight], _ = train(features_data, [(0, CONFIGS[0])], epochs=2)
    [m] = members(features_data, [(0, CONFIGS[0])])
    pack = Pack([m], features_data, PackSettings(**PLAIN))
    pack.train({m.trial_id: 5})
    pack.train({m.trial_id: m.steps_for(2) - 5})
    assert_same_weights(straight, m)


def test_images_are_gathered_and_scaled_on_the_device(image_data):
    configs = list(enumerate(CONFIGS[:2]))
    packed, packed_eval = train(image_data, configs, epochs=1)
    [alone], _ = train(image_data, configs[1:], epochs=1)
    assert_same_weights(alone, packed[1])
    assert all(0 <= e.val_accuracy <= 1 for e in packed_eval.values())


def test_a_diverging_member_fails_alone(features_data):
    boom = (30, "sgd", 1e12, "relu")
    configs = [(0, CONFIGS[0]), (9, boom), (1, CONFIGS[1])]
    packed, evaluation = train(features_data, configs, epochs=2, chunk_steps=4)
    assert packed[1].failed
    assert evaluation["t9"].val_accuracy is None
    for m in (packed[0], packed[2]):
        assert not m.failed
        i = int(m.trial_id[1:])
        [alone], alone_eval = train(features_data, [(i, CONFIGS[i])], epochs=2)
        assert_same_weights(alone, m)
        assert alone_eval[m.trial_id] == evaluation[m.trial_id]


def test_sigmoid_with_lr_0_1_does_not_disturb_pack_mates(features_data):
    configs = [(0, CONFIGS[0]), (5, (20, "adam", 0.1, "sigmoid"))]
    packed, _ = train(features_data, configs, epochs=2)
    [alone], _ = train(features_data, configs[:1], epochs=2)
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


def test_member_rejects_a_batch_larger_than_the_data(features_data):
    with pytest.raises(ValueError, match="batch_size=1000"):
        members(features_data, [(0, (1000, "sgd", 0.1, "relu"))])


def test_unknown_misaligned_mode(features_data):
    with pytest.raises(ValueError, match="misaligned='pad'"):
        Pack(members(features_data, [(0, CONFIGS[0])]), features_data,
             PackSettings(misaligned="pad"))


def image_members(features_data, configs, preprocessing):
    build = functools.partial(mlp3.build, width=8)
    ds = features_data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          features_data.train_size, preprocessing) for i, c in configs]


AUGMENT = Preprocessing(mean=(0.5,), std=(0.25,), crop_padding=1, flip=True)


def test_augmentation_is_seeded_per_member_so_packing_keeps_isolation(image_data):
    configs = list(enumerate(CONFIGS[:3]))
    packed = image_members(image_data, configs, AUGMENT)
    Pack(packed, image_data,
         PackSettings(**PLAIN)).train({m.trial_id: m.steps_for(2) for m in packed})
    [alone] = image_members(image_data, configs[2:], AUGMENT)
    Pack([alone], image_data, PackSettings(**PLAIN)).train({alone.trial_id: alone.steps_for(2)})
    assert_same_weights(alone, packed[2])
    [plain] = image_members(image_data, configs[2:], Preprocessing())
    Pack([plain], image_data, PackSettings(**PLAIN)).train({plain.trial_id: plain.steps_for(2)})
    assert not np.array_equal(plain.model.get_weights()[0], alone.model.get_weights()[0])


def test_random_crop_takes_a_window_of_the_padded_image():
    from packexp.packing.data import _random_crop

    x = tf.reshape(tf.range(2 * 4 * 4, dtype=tf.float32), [2, 4, 4, 1])
    out = _random_crop(x, 1, tf.constant([3, 4], tf.int64)).numpy()
    padded = np.pad(x.numpy(), [[0, 0], [1, 1], [1, 1], [0, 0]])
    for i in range(2):
        windows = [padded[i, r:r + 4, c:c + 4] for r in range(3) for c in range(3)]
        assert any(np.array_equal(out[i], w) for w in windows)


def test_preprocessing_rejects_augmenting_features(features_data):
    with pytest.raises(ValueError, match="flip=True: needs images"):
        Preprocessing(flip=True).check(features_data.dataset.input_shape)
    with pytest.raises(ValueError, match=r"mean=.*needs 1 or 2 values"):
        Preprocessing(mean=(0.1, 0.2, 0.3)).check((6, 6, 2))


def test_slice_mode_feeds_the_leaders_stream_sliced(features_data):
    """The largest-batch member trains as alone; the others see its features_data, not their own."""
    configs = [(2, CONFIGS[2]), (0, CONFIGS[0])]  # batch 70 leads, batch 20 slices
    packed = members(features_data, configs)
    Pack(packed, features_data, PackSettings(**PLAIN, data_sharing="slice")).train(
        {m.trial_id: 6 for m in packed})
    alone = members(features_data, configs)
    for m in alone:
        Pack([m], features_data, PackSettings(**PLAIN)).train({m.trial_id: 6})
    assert_same_weights(alone[0], packed[0])
    assert not np.array_equal(alone[1].model.get_weights()[0], packed[1].model.get_weights()[0])


def test_slice_mode_runs_each_distinct_preprocessing_once(image_data, monkeypatch):
    calls = []
    original = Preprocessing.__call__

    def counting(self, x, seed):
        calls.append(self)
        return original(self, x, seed)

    monkeypatch.setattr(Preprocessing, "__call__", counting)
    configs = list(enumerate(CONFIGS[:3]))
    ms = image_members(image_data, configs, AUGMENT)
    ms[2].preprocessing = Preprocessing()
    for sharing, expected in (("slice", 2), ("gather", 3)):
        calls.clear()
        Pack(ms, image_data,
             PackSettings(**PLAIN, data_sharing=sharing)).train({m.trial_id: 2 for m in ms})
        assert len(calls) == expected, sharing  # traced once: one call per op in the graph


def built(features_data, configs, build) -> list[Member]:
    ds = features_data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          features_data.train_size) for i, c in configs]


def test_dropout_members_pack_as_alone_and_continue_their_draws(features_data, tmp_path):
    """Each member's Dropout draws from its own seed generator, seeded by the trial, and the
    generator's state is in the checkpoint: packed equals alone, and a member continued
    from its checkpoint ends as trained straight through."""
    configs = list(enumerate(CONFIGS[:2]))
    packed = built(features_data, configs, mlp_with_dropout)
    Pack(packed, features_data,
         PackSettings(fusion="auto", jit_compile=False, chunk_steps=7)).train(
        {m.trial_id: 20 for m in packed})
    for m, config in zip(packed, configs, strict=True):
        [alone] = built(features_data, [config], mlp_with_dropout)
        pack = Pack([alone], features_data, PackSettings(**PLAIN))
        pack.train({alone.trial_id: 8})
        path = pack.free(alone.trial_id, tmp_path)
        [continued] = built(features_data, [config], mlp_with_dropout)
        continued.restore(path)
        Pack([continued], features_data, PackSettings(**PLAIN)).train({continued.trial_id: 12})
        assert continued.step == m.step == 20
        assert_same_weights(continued, m)


def test_regularization_losses_are_part_of_each_members_loss(features_data):
    """A kernel regularizer's loss is in the step, as in Keras's fit: one SGD step matches
    the gradient of the cross-entropy plus the penalty."""
    def regularized(input_shape, num_classes, hparams):
        return keras.Sequential([keras.Input(tuple(input_shape)), keras.layers.Dense(
            num_classes, kernel_regularizer=keras.regularizers.L2(0.5))])

    config = (0, (32, "sgd", 0.1, "relu"))
    [m] = built(features_data, [config], regularized)
    [reference] = built(features_data, [config], regularized)
    batch = m.next_batches(1)[0]
    x, y = tf.gather(features_data.x_train, batch), tf.gather(features_data.y_train, batch)
    kernel = reference.model.trainable_variables
    with tf.GradientTape() as tape:
        ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
            y, reference.model(x, training=True))
        loss = ce + tf.add_n(reference.model.losses)
    expected = [v.numpy() - 0.1 * g.numpy() for v, g in zip(kernel, tape.gradient(loss, kernel),
                                                            strict=True)]
    Pack([m], features_data, PackSettings(**PLAIN)).train({m.trial_id: 1})
    for got, want in zip(m.model.get_weights(), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert m.train_loss == pytest.approx(float(loss), rel=1e-5)


def test_weight_constraints_are_applied_after_each_update(features_data):
    def constrained(input_shape, num_classes, hparams):
        return keras.Sequential([keras.Input(tuple(input_shape)), keras.layers.Dense(
            num_classes, kernel_constraint=keras.constraints.NonNeg())])

    ms = built(features_data, list(enumerate(CONFIGS[:2])), constrained)
    Pack(ms, features_data,
         PackSettings(fusion="auto", jit_compile=False)).train({m.trial_id: 10 for m in ms})
    for m in ms:
        assert m.model.layers[0].kernel.numpy().min() >= 0
