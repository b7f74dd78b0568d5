"""Reused packs: new trials on kept models and traced steps end where fresh packs do."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from packexp.data import synthetic
from packexp.models import mlp3
from packexp.packing import DeviceData, Member
from packexp.packing.cache import PackCache, member_key
from packexp.packing.data import Preprocessing
from packexp.packing.trainer import train_group
from packexp.testing.members import make_cache, trial
from packexp.testing.models import every_layer_cnn, mlp_with_dropout

pytestmark = pytest.mark.tf

# Two packs of one structure: the same optimizers and activations, in another order, with
# other batch sizes and learning rates.
FIRST = [(20, "adam", 1e-3, "relu"), (45, "momentum", 1e-2, "tanh"),
         (70, "adagrad", 1e-2, "sigmoid")]
SECOND = [(64, "momentum", 1e-1, "tanh"), (25, "adagrad", 1e-1, "sigmoid"),
          (32, "adam", 1e-2, "relu")]


@pytest.fixture(scope="module")
def images() -> DeviceData:
    return DeviceData(synthetic.load(shape=[12, 12, 3], num_classes=3, train_size=120,
                                     val_size=30))


def search(cache: PackCache, epochs=(1.0, 2.5)) -> dict:
    """Two rungs of two packs each: the second rung continues every trial from its state."""
    first = [trial(i, *c) for i, c in enumerate(FIRST)]
    second = [trial(10 + i, *c) for i, c in enumerate(SECOND)]
    states: dict = {}
    out = {}
    for rung, e in enumerate(epochs):
        for group in (first, second):
            [run] = train_group(group, cache, e, {t.trial_id: states.get(t.trial_id)
                                                  for t in group})
            for m in run.members:
                states[m.trial_id] = m.state
                out[m.trial_id, rung] = (m.state, run.evaluation[m.trial_id], run.reused,
                                         run.stats.fused)
    return out


def assert_same(a: dict, b: dict, exact: bool) -> None:
    assert a.keys() == b.keys()
    for key in a:
        (sa, ea, _, _), (sb, eb, _, _) = a[key], b[key]
        assert sa.step == sb.step
        for x, y in zip(sa.weights + sa.slots, sb.weights + sb.slots, strict=True):
            if exact:
                np.testing.assert_array_equal(x, y, err_msg=str(key))
            else:
                np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5, err_msg=str(key))
        if exact:
            assert ea == eb
        else:
            assert ea.val_loss == pytest.approx(eb.val_loss, rel=1e-4)


@pytest.mark.parametrize("misaligned", ["mask", "switch"])
def test_a_reused_plain_pack_ends_bit_for_bit_where_a_fresh_one_does(features_data, misaligned):
    reused = make_cache(features_data, keep=8, fusion="off", misaligned=misaligned)
    fresh = make_cache(features_data, keep=0, fusion="off", misaligned=misaligned)
    a, b = search(reused), search(fresh)
    assert [r for _, _, r, _ in a.values()] == [False] * 3 + [True] * 9
    assert not any(r for _, _, r, _ in b.values())
    assert reused.hits == 3 and reused.misses == 1
    assert_same(a, b, exact=True)


def test_reused_packs_of_dropout_members_end_bit_for_bit_where_fresh_ones_do(features_data):
    """A new trial loaded into a kept model takes its seed generator's state too, so its
    Dropout masks are its own, as in a fresh build."""
    a = search(make_cache(features_data, keep=8, build=mlp_with_dropout, fusion="auto"))
    b = search(make_cache(features_data, keep=0, build=mlp_with_dropout, fusion="auto"))
    assert a[("t10", 0)][2] and not any(fused for _, _, _, fused in a.values())
    assert_same(a, b, exact=True)


def test_reused_plain_packs_keep_seeded_augmentation(images):
    flip = Preprocessing(flip=True, crop_padding=1)
    a = search(make_cache(images, keep=8, build=every_layer_cnn, preprocessing=flip,
                          fusion="off"), epochs=(0.5,))
    b = search(make_cache(images, keep=0, build=every_layer_cnn, preprocessing=flip,
                          fusion="off"), epochs=(0.5,))
    assert a[("t10", 0)][2]  # the second pack ran on the first one's models
    assert_same(a, b, exact=True)


def test_a_reused_fused_pack_ends_where_a_fresh_one_does(features_data):
    a = search(make_cache(features_data, keep=8, fusion="on"))
    b = search(make_cache(features_data, keep=0, fusion="on"))
    assert all(fused for _, _, _, fused in a.values())
    assert a[("t10", 0)][2] and a[("t0", 1)][2]
    assert_same(a, b, exact=False)


def test_a_reused_fused_cnn_pack_ends_where_a_fresh_one_does(images):
    a = search(make_cache(images, keep=8, build=every_layer_cnn, fusion="on",
                          grouped_conv="split"), epochs=(0.5, 1.0))
    b = search(make_cache(images, keep=0, build=every_layer_cnn, fusion="on",
                          grouped_conv="split"), epochs=(0.5, 1.0))
    assert a[("t10", 0)][2]
    assert_same(a, b, exact=False)


def regroup(cache: PackCache) -> dict:
    """Packs of other structures than the kept ones, sharing member structures with them."""
    rungs = [
        (1.0, [[(0, *FIRST[0]), (1, *FIRST[1]), (2, *FIRST[2])]]),
        # adam/relu from the first pack; sgd/tanh is new.
        (1.0, [[(10, *SECOND[2]), (11, 30, "sgd", 1e-1, "tanh")],
               # momentum/tanh and adagrad/sigmoid: the broken pack's loose members.
               [(12, *SECOND[0]), (13, *SECOND[1])]]),
        # Continued trials in yet other packs.
        (2.0, [[(0, *FIRST[0]), (13, *SECOND[1])], [(12, *SECOND[0]), (1, *FIRST[1])]]),
    ]
    states: dict = {}
    out = {}
    for rung, (epochs, groups) in enumerate(rungs):
        for configs in groups:
            group = [trial(*c) for c in configs]
            [run] = train_group(group, cache, epochs, states)
            for m in run.members:
                states[m.trial_id] = m.state
                out[m.trial_id, rung] = (m.state, run.evaluation[m.trial_id],
                                         run.reused_members, run.stats.fused)
    return out


@pytest.mark.parametrize("fusion", ["off", "on"])
def test_members_taken_from_kept_packs_of_other_structures_end_where_fresh_ones_do(features_data,
                                                                                  fusion):
    # Unrolled plain packs: looped ones hold their members' states and take none (below).
    cache = make_cache(features_data, keep=8, fusion=fusion, loop="off")
    a, b = regroup(cache), regroup(make_cache(features_data, keep=0, fusion=fusion, loop="off"))
    # Structures here are activations: optimizers with update rules are runtime data.
    assert cache.hits == 0
    assert a[("t10", 1)][2] == 2  # relu and tanh, from the broken first pack
    assert a[("t12", 1)][2] == 2  # sigmoid left loose; tanh from the pack just kept
    assert a[("t0", 2)][2] == 2  # relu left loose; sigmoid from another broken pack
    assert a[("t12", 2)][2] == 1  # one tanh member was left; the other is built
    assert not any(r for _, _, r, _ in b.values())
    assert all(fused == (fusion == "on") for _, _, _, fused in a.values())
    assert_same(a, b, exact=fusion == "off")


def test_looped_packs_hold_states_on_one_template_and_end_as_fresh_unrolled_ones(features_data):
    """Packs of one structure loop over states held on the structure's template
    (``HeldMember``): beyond it, only the build that confirms its replayed initial weights
    is made, and every member ends bit for bit as the unrolled engine trains it afresh."""

    def cache(keep: int, **options) -> PackCache:
        made = make_cache(features_data, keep, fusion="off", **options)
        made.model_runtime = ("activation",)  # mlp3's: every trial here is one structure
        return made

    held, builds = cache(8), []
    make = held.make_member
    held.make_member = lambda t: builds.append(t.trial_id) or make(t)
    a = search(held)
    assert_same(a, search(cache(0, loop="off")), exact=True)
    assert len(builds) == 2 and len(a) == 12


def test_a_reused_compiled_pack_keeps_its_idle_seat_and_ends_where_a_fresh_one_does(
        features_data):
    """Compiled packs (XLA, batches padded to the bucket) of one structure are kept per
    member-count bucket: a pack of three trains in a program of four seats, the fourth
    idle, and the next pack of three takes it over with that seat idle again, ending bit for
    bit where a fresh pack does. The bucket here is below the largest batch (a search's is
    the largest): the member of batch 70 trains unpadded, and the trial of batch 32 that
    takes its seat, padded, runs a program of its own (the reused one trained on its padded
    rows as if they were data)."""

    def cache(keep: int) -> PackCache:
        made = make_cache(features_data, keep, fusion="off", loop="off", jit_compile="auto",
                          batch_bucket=64, misaligned="mask", data_sharing="gather")
        made.model_runtime = ("activation",)  # mlp3's: every trial here is one structure
        return made

    reused, fresh = cache(8), cache(0)
    a, b = search(reused), search(fresh)
    assert reused.bucketed and fresh.bucketed
    assert [r for _, _, r, _ in a.values()] == [False] * 3 + [True] * 9
    assert reused.hits == 3 and reused.misses == 1
    assert_same(a, b, exact=True)


@pytest.mark.parametrize("fusion", ["off", "on"])
def test_a_pack_shelved_after_a_calibration_serves_its_key_unseen_and_ends_as_a_fresh_one(
        features_data, fusion):
    """``clear(shelve=True)``, as a calibration ends: its compiled pack of three (a bucket of
    four, the fourth seat idle) is kept where no plan sees it, and the search's first pack
    of that key trains in it (a fused one re-stacked, the idle seat on the calibration's
    trained weights), ending where a pack on a cache that never calibrated does: bit for bit
    plain, to float rounding fused. A plain ``clear()`` (a pack out of memory) drops it."""

    def cache(keep: int = 8) -> PackCache:
        made = make_cache(features_data, keep, fusion=fusion, loop="off", jit_compile="auto",
                          batch_bucket=70, misaligned="mask", data_sharing="gather")
        made.model_runtime = ("activation",)  # mlp3's: every trial here is one structure
        return made  # (the bucket: the largest batch, as a search's)

    calibrated, fresh = cache(), cache()
    calibration = [trial(100 + i, *c) for i, c in enumerate(reversed(FIRST))]
    train_group(calibration, calibrated, 0.5, {})
    calibrated.clear(shelve=True)
    assert len(calibrated._shelf) == 1  # the pack of three, compiled
    assert (calibrated.kept(), calibrated.replayed) == (fresh.kept(), fresh.replayed)
    a, b = search(calibrated), search(fresh)
    assert not calibrated._shelf  # its key's first pack took it
    assert (calibrated.hits, calibrated.misses) == (fresh.hits, fresh.misses)
    assert [r for _, _, r, _ in a.values()] == [r for _, _, r, _ in b.values()]
    assert_same(a, b, exact=fusion == "off")
    train_group(calibration, calibrated, 0.5, {})
    calibrated.clear(shelve=True)
    calibrated.clear()
    assert not calibrated._shelf
    one = cache(keep=1)  # a shelved pack counts against keep: the first kept one evicts it
    train_group(calibration, one, 0.5, {})
    one.clear(shelve=True)
    assert len(one._shelf) == 1
    train_group([trial(200, *FIRST[0])], one, 0.5, {})  # a single: another key
    assert not one._shelf and len(one.kept()[0]) == 1


def test_loose_members_are_bounded_by_keep(features_data):
    cache = make_cache(features_data, keep=1, fusion="off")
    train_group([trial(0, *FIRST[0]), trial(1, *FIRST[1])], cache, 0.5, {})
    train_group([trial(2, *FIRST[0]), trial(3, 30, "sgd", 1e-1, "sigmoid")], cache, 0.5, {})
    assert cache.members_reused == 1
    assert sum(map(len, cache._loose.values())) <= 1


def test_the_structure_key_leaves_out_runtime_hyper_parameters():
    """Batch size, learning rate, an optimizer with an update rule and its options, and what
    the model declares (mlp3's activation) are runtime data; the rest is structure."""
    a, b = trial(0, 20, "adam", 1e-3, "relu"), trial(1, 70, "sgd", 1e-1, "relu")
    assert member_key(a) == member_key(b)
    assert member_key(a) != member_key(trial(2, 20, "adam", 1e-3, "tanh"))
    assert member_key(a, model=("activation",)) == member_key(trial(2, 20, "adam", 1e-3, "tanh"),
                                                              model=("activation",))
    # Keras's own update (no rule) and an option no rule has are structure.
    assert member_key(a) != member_key(trial(3, 20, "rmsprop", 1e-3, "relu"))
    nesterov = trial(4, 20, "momentum", 1e-3, "relu")
    nesterov = dataclasses.replace(nesterov, hparams={**nesterov.hparams, "nesterov": True})
    assert member_key(a) != member_key(nesterov)
    assert member_key(a, sliced=True) != member_key(b, sliced=True)  # slices cut at traced sizes


def test_keep_bounds_the_packs_kept(features_data):
    cache = make_cache(features_data, keep=1, fusion="off")
    for configs in ([FIRST[0]], [FIRST[1]], [FIRST[0]]):
        group = [trial(0, *c) for c in configs]
        train_group(group, cache, 0.5, {})
    assert (cache.hits, cache.misses) == (0, 3)  # the adam pack was dropped for the momentum one


@pytest.mark.parametrize("model", ["mlp3", "dropout", "cnn", "mobilenet"])
def test_replayed_initial_weights_are_those_of_a_fresh_build(model):
    """Weights, and the seed generators' states (Dropout's)."""
    from packexp.models import mobilenet
    from packexp.packing.initial import InitialWeights

    shape, build = {
        "mlp3": ([12], functools.partial(mlp3.build, width=16)),
        "dropout": ([12], mlp_with_dropout),
        "cnn": ([12, 12, 3], every_layer_cnn),
        "mobilenet": ([8, 8, 1], functools.partial(mobilenet.build, alpha=0.35)),
    }[model]

    def fresh(t):
        return Member.create(t, build, shape, 4, 100)

    first = trial(0, 20, "adam", 1e-3, "tanh")
    replay = InitialWeights(fresh(first).model, first.seed)
    for i in (1, 2):
        t = trial(i, 20, "adam", 1e-3, "tanh")
        for got, want in zip(replay.replay(t.seed), fresh(t).state().weights, strict=True):
            np.testing.assert_array_equal(got, want)


def test_the_cache_replays_initial_states_only_once_a_build_confirmed_them(features_data,
                                                                          monkeypatch):
    cache = make_cache(features_data, keep=8, fusion="off")
    built = []
    make = cache.make_member
    monkeypatch.setattr(cache, "make_member", lambda t: built.append(t.trial_id) or make(t))
    configs = [(20, "adam", 1e-3, "relu"), (45, "adam", 1e-2, "relu"),
               (70, "adam", 1e-1, "relu")]
    for i, c in enumerate(configs):
        t = trial(i, *c)
        [run] = train_group([t], cache, 0.5, {})
        [fresh] = train_group([t], make_cache(features_data, keep=0, fusion="off"), 0.5, {})
        for a, b in zip(run.members[0].state.weights + run.members[0].state.slots,
                        fresh.members[0].state.weights + fresh.members[0].state.slots,
                        strict=True):
            np.testing.assert_array_equal(a, b)
    # t0 is built for the pack, t1 to confirm the replay; t2's state is replayed.
    assert built == ["t0", "t1"]
