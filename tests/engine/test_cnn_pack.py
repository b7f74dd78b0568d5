"""The isolation invariant for CNNs: BatchNorm and resizing included, packed equals alone.

make test checks it on a small CNN with BatchNorm and on cnn1d over sequences; MobileNetV2
(resizing on the device too) and the paper's three CNNs in one pack run in make
test-paper-cnns, minutes on a CPU."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from packexp.data import synthetic
from packexp.data.arrays import from_arrays
from packexp.models import cnn1d, mobilenet
from packexp.packing import DeviceData, Evaluation, Member, Pack
from packexp.space import Trial, derive_seed
from packexp.space.options import PackSettings
from packexp.testing.members import PLAIN
from packexp.testing.models import small_cnn

pytestmark = pytest.mark.tf

MOBILENET = functools.partial(mobilenet.build, alpha=0.35)
CNN1D = functools.partial(cnn1d.build, width=4, blocks=2)
TRIALS = [  # misaligned: 8 and 5 steps per epoch of 64 examples
    Trial("t0", {"batch_size": 8, "optimizer": "adam", "learning_rate": 1e-3,
                 "activation": "relu"}, (), seed=derive_seed(3, 0)),
    Trial("t1", {"batch_size": 12, "optimizer": "momentum", "learning_rate": 1e-2,
                 "activation": "tanh"}, (), seed=derive_seed(3, 1)),
]


def images():
    return synthetic.load(shape=[16, 16, 3], num_classes=3, train_size=64, val_size=16)


def sequences():
    """64 float signals of 24 steps and 2 features to train on, 16 to validate."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(80, 24, 2)), np.arange(80) % 3
    return from_arrays(x[:64], y[:64], x[64:], y[64:], name="signals", source="test")


@pytest.fixture(scope="module", params=[
    pytest.param((small_cnn, images), id="small_cnn"),
    pytest.param((CNN1D, sequences), id="cnn1d"),
    pytest.param((MOBILENET, images), id="mobilenet", marks=pytest.mark.paper_cnns)])
def case(request):
    return request.param


@pytest.fixture(scope="module")
def build(case):
    return case[0]


@pytest.fixture(scope="module")
def data(case) -> DeviceData:
    return DeviceData(case[1]())


def train(data: DeviceData, build, trials: list[Trial]
          ) -> tuple[list[Member], dict[str, Evaluation]]:
    ds = data.dataset
    members = [Member.create(t, build, ds.input_shape, ds.num_classes, data.train_size)
               for t in trials]
    pack = Pack(members, data, PackSettings(**PLAIN))
    pack.train({m.trial_id: m.steps_for(1) for m in members})
    return members, pack.evaluate()


@pytest.fixture(scope="module")
def packed(data, build) -> tuple[list[Member], dict[str, Evaluation]]:
    return train(data, build, TRIALS)


@pytest.mark.parametrize("index", range(len(TRIALS)))
def test_packed_cnn_ends_bit_identical_to_alone(data, build, packed, index):
    members, evaluation = packed
    assert [m.step for m in members] == [8, 5]
    [alone], alone_evaluation = train(data, build, [TRIALS[index]])
    member = members[index]
    assert alone.step == member.step
    # get_weights holds BatchNorm's moving statistics too.
    for a, b in zip(alone.model.get_weights(), member.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(alone.optimizer.variables, member.optimizer.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert alone_evaluation[member.trial_id] == evaluation[member.trial_id]
    assert evaluation[member.trial_id].val_loss is not None


def test_packed_cnn_training_moves_every_weight_and_batchnorm_statistic(data, build, packed):
    """Keeps the equality above from holding merely because nothing trained."""
    members, _ = packed
    ds = data.dataset
    for m in members:
        fresh = Member.create(m.trial, build, ds.input_shape, ds.num_classes, data.train_size)
        unmoved = [w.path for w, f in zip(m.model.weights, fresh.model.weights, strict=True)
                   if np.array_equal(w.numpy(), f.numpy())]
        assert unmoved == []
        assert any(w.path.endswith("moving_mean") for w in m.model.weights)


@pytest.mark.slow
@pytest.mark.paper_cnns
def test_a_pack_of_all_three_paper_cnns_matches_each_alone():
    """MobileNetV2, ResNet-50 and DenseNet-121 in one pack, resized up from 8x8 images."""
    from packexp.models import keras_apps

    tiny = DeviceData(synthetic.load(shape=[8, 8, 3], num_classes=3, train_size=24,
                                     val_size=8))
    builds = [MOBILENET] + [functools.partial(keras_apps.build, application=a)
                        for a in ("ResNet50", "DenseNet121")]
    trials = [Trial(f"c{i}", {"batch_size": b, "optimizer": o, "learning_rate": 1e-3,
                              "activation": a}, (), seed=derive_seed(4, i))
              for i, (b, o, a) in enumerate([(8, "adam", "relu"), (6, "sgd", "tanh"),
                                             (4, "adagrad", "leaky_relu")])]

    def members(indices):
        return [Member.create(trials[i], builds[i], (8, 8, 3), 3, tiny.train_size)
                for i in indices]

    packed = members(range(3))
    pack = Pack(packed, tiny, PackSettings(**PLAIN))
    pack.train({m.trial_id: 2 for m in packed})
    evaluation = pack.evaluate()
    for i, m in enumerate(packed):
        [alone] = members([i])
        solo = Pack([alone], tiny, PackSettings(**PLAIN))
        solo.train({alone.trial_id: 2})
        for a, b in zip(m.model.get_weights(), alone.model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert solo.evaluate()[m.trial_id] == evaluation[m.trial_id]
