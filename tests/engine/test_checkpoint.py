"""Free and load: a checkpointed member trains on exactly as if it had never stopped."""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from packexp.models import mlp3
from packexp.packing import Member, Pack
from packexp.space import Trial, derive_seed
from packexp.space.options import PackSettings
from packexp.testing.members import PLAIN

pytestmark = pytest.mark.tf

TRAIN_SIZE = 300


def trial(i: int, batch_size: int, optimizer: str, learning_rate: float = 1e-2,
          activation: str = "tanh") -> Trial:
    hparams = {"batch_size": batch_size, "optimizer": optimizer,
               "learning_rate": learning_rate, "activation": activation}
    return Trial(f"t{i}", hparams, (), seed=derive_seed(7, i))


def member(t: Trial, width: int = 16, depth: int = 3) -> Member:
    build = functools.partial(mlp3.build, width=width, depth=depth)
    return Member.create(t, build, (12,), 4, TRAIN_SIZE)


def assert_same_state(a: Member, b: Member) -> None:
    assert a.step == b.step
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


@pytest.fixture
def batches(monkeypatch) -> dict[int, list[np.ndarray]]:
    """Every batch each member object gathers, by ``id(member)``, in order."""
    seen: dict[int, list[np.ndarray]] = defaultdict(list)
    original = Member.next_batches

    def recording(self: Member, steps: int) -> np.ndarray:
        out = original(self, steps)
        seen[id(self)].append(out)
        return out

    monkeypatch.setattr(Member, "next_batches", recording)
    return seen


@pytest.mark.parametrize("batch_size", [20, 45])
@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_loaded_member_trains_on_as_if_never_freed(features_data, tmp_path, batches, optimizer,
                                                   batch_size):
    t = trial(0, batch_size, optimizer)
    straight = member(t)
    total = straight.steps_for(2.5)
    stop = total * 3 // 5  # mid-epoch, past the first epoch boundary
    assert stop % straight.steps_per_epoch and stop > straight.steps_per_epoch
    straight_pack = Pack([straight], features_data, PackSettings(**PLAIN, chunk_steps=5))
    straight_pack.train({t.trial_id: total})

    first = member(t)
    mate = member(trial(1, 30, "sgd"))
    pack = Pack([first, mate], features_data, PackSettings(**PLAIN, chunk_steps=5))
    pack.train({t.trial_id: stop, mate.trial_id: stop})
    path = pack.free(t.trial_id, tmp_path)
    assert Path(path).exists()
    assert pack.members == [mate]

    new_mate = member(trial(2, 70, "adagrad"))
    new_pack = Pack([new_mate], features_data, PackSettings(**PLAIN, chunk_steps=7))
    resumed = new_pack.load(member(t), path)
    assert resumed.step == stop
    new_pack.train({t.trial_id: total - resumed.step, new_mate.trial_id: 3})

    assert_same_state(straight, resumed)
    assert new_pack.evaluate()[t.trial_id] == straight_pack.evaluate()[t.trial_id]
    np.testing.assert_array_equal(
        np.concatenate(batches[id(first)] + batches[id(resumed)]),
        np.concatenate(batches[id(straight)]),
    )


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_restore_brings_back_weights_slots_and_step(features_data, tmp_path, optimizer):
    t = trial(3, 25, optimizer)
    trained = member(t)
    pack = Pack([trained], features_data, PackSettings(**PLAIN))
    pack.train({t.trial_id: 17})
    path = pack.free(t.trial_id, tmp_path)
    assert pack.members == []

    fresh = member(t)
    assert fresh.step == 0
    assert not np.array_equal(fresh.model.get_weights()[0], trained.model.get_weights()[0])
    restored = fresh.restore(path)
    assert restored is fresh
    assert_same_state(trained, restored)
    np.testing.assert_array_equal(restored.next_batches(4), trained.next_batches(4))


@pytest.mark.parametrize("misaligned", ["mask", "switch"])
def test_freeing_one_member_leaves_its_pack_mates_as_if_alone(features_data, tmp_path, misaligned):
    trials = [trial(4, 20, "adam"), trial(5, 45, "momentum"), trial(6, 30, "adagrad")]
    ms = [member(t) for t in trials]
    pack = Pack(ms, features_data, PackSettings(**PLAIN, misaligned=misaligned, chunk_steps=6))
    pack.train({m.trial_id: 8 for m in ms})
    pack.free("t5", tmp_path)
    assert [m.trial_id for m in pack.members] == ["t4", "t6"]
    pack.train({m.trial_id: m.steps_for(2) - m.step for m in pack.members})
    evaluation = pack.evaluate()
    assert set(evaluation) == {"t4", "t6"}

    for m, t in ((ms[0], trials[0]), (ms[2], trials[2])):
        alone = member(t)
        alone_pack = Pack([alone], features_data, PackSettings(**PLAIN))
        alone_pack.train({t.trial_id: alone.steps_for(2)})
        assert_same_state(alone, m)
        assert alone_pack.evaluate()[t.trial_id] == evaluation[t.trial_id]


@pytest.mark.parametrize(
    ("width", "depth", "optimizer"),
    # Optimizers with an update rule share one state layout (their rule is data, set from
    # the trial); Keras's own rmsprop keeps another.
    [(32, 3, "adam"), (8, 3, "adam"), (16, 4, "adam"), (16, 2, "adam"), (16, 3, "rmsprop")],
    ids=["wider", "narrower", "deeper", "shallower", "other-optimizer"],
)
def test_restore_into_a_different_architecture_fails_loudly(features_data, tmp_path, width, depth,
                                                             optimizer):
    t = trial(7, 20, "adam")
    pack = Pack([member(t)], features_data, PackSettings(**PLAIN))
    pack.train({t.trial_id: 3})
    path = pack.free(t.trial_id, tmp_path)
    other = member(trial(7, 20, optimizer), width=width, depth=depth)
    with pytest.raises((ValueError, AssertionError)):
        Pack([member(trial(8, 20, "sgd"))], features_data, PackSettings(**PLAIN)).load(other, path)


def test_freeing_an_unknown_trial_names_it(features_data, tmp_path):
    pack = Pack([member(trial(9, 20, "sgd"))], features_data, PackSettings(**PLAIN))
    with pytest.raises((KeyError, ValueError), match="nope"):
        pack.free("nope", tmp_path)


def test_a_state_of_another_rule_loads_its_weights_and_starts_the_rule_afresh(features_data,
                                                                              tmp_path):
    """A population's member that copies a donor of another update rule (``fresh_slots``)
    takes the donor's weights and its own rule's fresh slots, as a new optimizer would; the
    flag survives a checkpoint."""
    from packexp.packing.member import MemberState, read_state, write_state

    donor, copier = member(trial(0, 20, "adam")), member(trial(1, 30, "momentum", 0.05))
    Pack([donor], features_data, PackSettings(**PLAIN)).train({donor.trial_id: 9})
    fresh = copier.state()
    copied = donor.state()
    path = write_state(MemberState(copied.weights, copied.slots, 4, fresh_slots=True),
                       tmp_path / "copy")
    copier.load(copier.trial, read_state(path), copier.preprocessing)
    for w, v in zip(copier.model.get_weights(), donor.model.get_weights(), strict=True):
        np.testing.assert_array_equal(w, v)
    for v, value in zip(copier.optimizer.variables, fresh.slots, strict=True):
        np.testing.assert_array_equal(v.numpy(), value)
    assert copier.step == 4
    copier.load(copier.trial, copied, copier.preprocessing)  # the same rule's: its slots
    assert not all(np.array_equal(v.numpy(), value)
                   for v, value in zip(copier.optimizer.variables, fresh.slots, strict=True))
