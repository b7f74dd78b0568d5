"""Profile timing: arms in a balanced order, medians with a range, and no bias to either arm."""

from __future__ import annotations

import itertools
import statistics

import pytest

from packexp.models import mlp3
from packexp.packing import Member
from packexp.profile.timing import PackTimer, balanced, compare
from packexp.space import Trial, derive_seed

pytestmark = pytest.mark.tf  # packexp.profile.timing, balanced's module, times TensorFlow packs


@pytest.mark.parametrize("repeats", [1, 2, 3, 6])
def test_every_arm_runs_first_as_often_as_last(repeats):
    orders = balanced("ABC", repeats)
    assert len(orders) == repeats + repeats % 2
    assert all(sorted(o) == ["A", "B", "C"] for o in orders)
    for arm in "ABC":
        assert sum(o[0] == arm for o in orders) == sum(o[-1] == arm for o in orders)


class DriftingTimer:
    """A fake timer whose every call is slower than the last, and the first of a round slower
    still: the two biases that timing singles before the pack every time let through."""

    def __init__(self, arms: int) -> None:
        self.arms = arms
        self.calls = itertools.count()

    def prepare(self, key, members, digits_data, xla, **overrides):
        return ("pack", key)

    def time_ms(self, pack) -> float:
        call = next(self.calls)
        return 10.0 + 0.5 * call + (3.0 if call % self.arms == 0 else 0.0)

    def is_fused(self, key) -> bool:
        return False


class Alone:
    trial_id = "m0"


def test_a_drifting_machine_favours_neither_arm():
    result = compare(DriftingTimer(2), [Alone()], None, repeats=5, xla=[False],
                     pack_key="pack", single_keys=["single"])
    # Singles first every time would read IMPV of about +20% here.
    assert result.ts_seq_ms == pytest.approx(result.ts_pack_ms)
    assert abs(result.impv) < 0.01
    assert result.impv_low < 0 < result.impv_high


def test_a_pack_of_one_against_itself_reads_zero_within_its_spread(digits_data):
    ds = digits_data.dataset
    hp = {"batch_size": 32, "optimizer": "adam", "learning_rate": 1e-3, "activation": "relu"}
    member = Member.create(Trial("m0", hp, (), seed=derive_seed(0, 0)), mlp3.build,
                           ds.input_shape, ds.num_classes, digits_data.train_size)
    timer = PackTimer({"fusion": "off"}, steps=20, warmup_steps=5)
    result = compare(timer, [member], digits_data, repeats=12, xla=[False], pack_key=("pack", 1),
                     single_keys=["identical"])
    assert len(result.impvs) == 12
    assert result.impv_low <= 0 <= result.impv_high, result.impvs
    assert result.impv_low <= result.impv <= result.impv_high
    assert statistics.median(result.impvs) == result.impv
