"""FLOPs per example (``objective.metrics``' ``flops``), against hand counts."""

from __future__ import annotations

import keras
import pytest

from packexp.models import cnn, mlp3
from packexp.models.flops import flops_per_example
from packexp.objectives import Objective

pytestmark = pytest.mark.tf


def test_a_dense_stack_counts_two_flops_per_multiply_add():
    model = mlp3.build((64,), 10, {"activation": "relu", "width": 32})
    assert flops_per_example(model) == 2 * (64 * 32 + 32 * 32 + 32 * 32 + 32 * 10)


def test_convolutions_count_their_window_channels_and_output_positions():
    model = cnn.build((8, 8, 1), 3, {"activation": "relu"})
    # 3x3 conv 1->16 at 8x8, max pool, 3x3 conv 16->32 at 4x4, global pool, dense 32->3
    assert flops_per_example(model) == 2 * (9 * 1 * 16 * 64 + 9 * 16 * 32 * 16 + 32 * 3)


def test_depthwise_and_separable_convolutions_count_each_part():
    inputs = keras.Input((6, 6, 4))
    x = keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2)(inputs)
    x = keras.layers.SeparableConv2D(5, 3, padding="valid")(x)
    model = keras.Model(inputs, x)
    depthwise = 9 * 4 * 2 * 36
    separable = (9 * 8 + 8 * 5) * 16  # 3x3 depthwise over 8 channels, then 8->5, at 4x4
    assert flops_per_example(model) == 2 * (depthwise + separable)


def test_flops_is_a_metric_an_objective_may_rank_by():
    objective = Objective(metrics=[{"name": "val_accuracy", "mode": "max"},
                                   {"name": "flops", "mode": "min"}])
    assert objective.goals == (("val_accuracy", "max"), ("flops", "min"))
