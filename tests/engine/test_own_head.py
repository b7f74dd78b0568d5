"""A model's own loss and Keras metrics (``model.loss``, ``model.metrics``): checked in one
line, measured per member in the packed evaluation, exact against training alone."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from packexp.config import check_search
from packexp.errors import ConfigError
from packexp.objectives import Head
from packexp.testing.config import compose_config
from packexp.testing.members import CONFIGS, trial
from packexp.testing.searches import search

TOP3 = "+model.metrics=[{_target_:keras.metrics.SparseTopKCategoricalAccuracy,k:3,name:top3}]"


@pytest.mark.parametrize(("overrides", "line"), [
    (["+model.loss=huber"], r"^model\.loss='huber': must be a node with _target_ "),
    (["+model.metrics=[{name:auc}]"], r"^model\.metrics\[0\]=\{'name': 'auc'\}: must be a "
                                      r"node with _target_ "),
    (["+model.metrics=[{_target_:keras.metrics.Accuracy,name:accuracy}]"],
     r"^model\.metrics: val_accuracy is measured already; give the metric another name"),
    (["objective.metric=val_top3"], r"^objective\.metric=val_top3: not measured by this "
                                    r"search; the model's own metrics are none "),
    ([TOP3, "objective.metric=val_top5"], r"^objective\.metric=val_top5: not measured by this "
                                          r"search; the model's own metrics are \['val_top3'\]"),
])
def test_a_bad_head_or_an_unmeasured_metric_is_one_line(overrides, line):
    with pytest.raises(ConfigError, match=line):
        check_search(compose_config(overrides))


def test_a_metric_is_named_by_its_name_or_its_class():
    head = Head(metrics=({"_target_": "keras.metrics.AUC"},
                         {"_target_": "keras.metrics.SparseTopKCategoricalAccuracy",
                          "name": "top3"}))
    assert head.names == ["val_auc", "val_top3"] and head.custom
    assert check_search(compose_config([TOP3, "objective.metric=val_top3"]))[3].metric == (
        "val_top3")


HEAD = Head({"_target_": "keras.losses.SparseCategoricalCrossentropy", "from_logits": True,
             "ignore_class": 3},
            ({"_target_": "keras.metrics.SparseTopKCategoricalAccuracy", "k": 2,
              "name": "top2"},))


def train(features_data, configs, head, **settings):
    from packexp.models import mlp3
    from packexp.packing import DeviceData, Member, Pack
    from packexp.space.options import PackSettings

    data = DeviceData(features_data.dataset, head=head)
    build = functools.partial(mlp3.build, width=16)
    ds = data.dataset
    ms = [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes, data.train_size)
          for i, c in configs]
    pack = Pack(ms, data, PackSettings(**settings))
    stats = pack.train({m.trial_id: m.steps_for(2) for m in ms})
    return ms, pack.evaluate(), stats


@pytest.mark.tf
def test_an_own_loss_and_metric_pack_exactly_as_alone_and_keep_the_pack_plain(features_data):
    configs = list(enumerate(CONFIGS))
    packed, evaluation, stats = train(features_data, configs, HEAD, chunk_steps=7)
    assert not stats.fused and not stats.looped  # fusion=auto would fuse these Dense members
    own = {m.trial_id: evaluation[m.trial_id].extra["val_top2"] for m in packed}
    assert len(set(own.values())) > 1  # each member's own
    for config, member in zip(configs, packed, strict=True):
        [alone], alone_evaluation, _ = train(features_data, [config], HEAD, chunk_steps=7)
        for a, b in zip(alone.model.get_weights(), member.model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert alone_evaluation[member.trial_id] == evaluation[member.trial_id]
    plain, _, _ = train(features_data, configs[:1], Head(), chunk_steps=7)
    assert not np.array_equal(plain[0].model.get_weights()[0],
                              packed[0].model.get_weights()[0])  # the own loss trained it


@pytest.mark.tf
@pytest.mark.search
def test_a_search_ranks_by_the_models_own_metric(tmp_path):
    results = search(tmp_path, "experiment=quick", "tracking=none", "strategy=knn", TOP3,
                     "objective.metric=val_top3")
    rungs = [r for t in results["trials"] for r in t["rungs"] if r.get("metrics")]
    assert rungs and all(0 <= r["metrics"]["val_top3"] <= 1 for r in rungs)
    best = results["best"]
    assert best["metric"] == "val_top3"
    assert best["value"] == max(r["metrics"]["val_top3"] for r in rungs)
