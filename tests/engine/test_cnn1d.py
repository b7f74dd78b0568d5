"""model=cnn1d: its shapes (sequences, and feature vectors read as steps), its settings from the
search space, its FLOPs against a hand count, and the line that refuses images."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from packexp.models import cnn1d
from packexp.models.flops import flops_per_example

pytestmark = pytest.mark.tf

RELU = {"activation": "relu"}


def seeded(input_shape, hparams=RELU, **settings) -> keras.Model:
    keras.utils.set_random_seed(3)
    return cnn1d.build(input_shape, 5, hparams, **settings)


def test_feature_vectors_are_read_as_steps_of_one_feature():
    """The same network, weights and logits for [40] as for [40, 1]: so model=cnn1d on
    mnist1d scores alike with or without dataset.sequences."""
    flat, steps = seeded([40]), seeded([40, 1])
    for a, b in zip(flat.get_weights(), steps.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    x = np.random.default_rng(0).normal(size=(4, 40)).astype(np.float32)
    np.testing.assert_array_equal(flat(x, training=False), steps(x[..., None], training=False))


def test_takes_sequences_of_several_features():
    model = seeded([24, 3])
    assert tuple(model.output.shape) == (None, 5)
    assert model.get_layer(index=1).kernel.shape == (5, 3, 16)  # kernel_size, features, width


def test_width_blocks_and_kernel_size_come_from_hparams_over_its_settings():
    model = seeded([40, 1], {**RELU, "width": 4, "blocks": 2, "kernel_size": 3}, width=64)
    kernels = [tuple(lay.kernel.shape) for lay in model.layers
               if isinstance(lay, keras.layers.Conv1D)]
    assert kernels == [(3, 1, 4), (3, 4, 8)]


@pytest.mark.parametrize("key, value", [("width", 0), ("blocks", 1.5), ("kernel_size", True)])
def test_a_bad_setting_is_refused_naming_it(key, value):
    with pytest.raises(ValueError, match=rf"^{key}={value!r}"):
        cnn1d.build([40, 1], 5, {**RELU, key: value})


def test_images_are_refused_in_one_line_naming_the_key_that_gives_features():
    with pytest.raises(ValueError, match=r"^input_shape=\[8, 8, 1\]: cnn1d needs sequences "
                                         r"\[steps, features\] or feature vectors; use a dataset "
                                         r"without images \(e\.g\. dataset\.images=auto for "
                                         r"digits\)$"):
        cnn1d.build([8, 8, 1], 5, RELU)


def test_flops_count_each_convolution_s_window_channels_and_steps():
    # k5 conv 1->16 at 40 steps, pool, 16->32 at 20, pool, 32->64 at 10, global pool, 64->3
    want = 2 * (5 * 1 * 16 * 40 + 5 * 16 * 32 * 20 + 5 * 32 * 64 * 10 + 64 * 3)
    for shape in ([40, 1], [40]):
        assert flops_per_example(cnn1d.build(shape, 3, RELU)) == want
