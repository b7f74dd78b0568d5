"""Tiny trials and pack members (``CONFIGS``, ``trial``, ``members``) on the plain pack
(``PLAIN``), a pack cache of them (``make_cache``), and their weights compared exactly
(``assert_same_weights``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from packexp.space import Trial, derive_seed

if TYPE_CHECKING:
    from packexp.packing import DeviceData, Member
    from packexp.packing.cache import PackCache

CONFIGS = [  # (batch_size, optimizer, learning_rate, activation)
    (20, "adam", 1e-3, "relu"),
    (45, "momentum", 1e-2, "tanh"),
    (70, "adagrad", 1e-2, "sigmoid"),
    (32, "sgd", 1e-1, "leaky_relu"),
]
# The plain pack, traced but not compiled (a run's default is auto for both): the pack the
# isolation invariant holds bit for bit.
PLAIN = {"fusion": "off", "jit_compile": False}


def trial(i: int, batch: int, opt: str, lr: float, act: str) -> Trial:
    hp = {"batch_size": batch, "optimizer": opt, "learning_rate": lr, "activation": act}
    return Trial(f"t{i}", hp, (), seed=derive_seed(11, i))


def members(data: DeviceData, configs, width=32, preprocessing=None) -> list[Member]:
    """mlp3 members of ``width`` units, one per ``(i, config)`` of ``configs``."""
    from packexp.models import mlp3
    from packexp.packing import Member

    build = functools.partial(mlp3.build, width=width)
    ds = data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          data.train_size, preprocessing) for i, c in configs]


def assert_same_weights(a: Member, b: Member) -> None:
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


def make_cache(data: DeviceData, keep: int, build=None, preprocessing=None,
               **options) -> PackCache:
    from packexp.models import mlp3
    from packexp.packing import Member
    from packexp.packing.cache import PackCache

    build = build or functools.partial(mlp3.build, width=16)
    ds = data.dataset

    def make_member(t):
        return Member.create(t, build, ds.input_shape, ds.num_classes, data.train_size,
                             preprocessing)

    return PackCache(make_member, data, {**PLAIN, "chunk_steps": 7, **options}, keep=keep)
