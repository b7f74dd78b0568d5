"""pytest fixtures on ``packexp.testing``: ``pytest_plugins = ["packexp.testing.fixtures"]``.

The data fixtures are session-wide: one per test process, shared by every module that asks
(each is read-only by contract: a test that would change its data copies it first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from packexp.testing import data
from packexp.testing.fake_trainer import FakeTrainer

if TYPE_CHECKING:
    from packexp.packing import DeviceData


@pytest.fixture
def fake_trainer() -> FakeTrainer:
    """A ``FakeTrainer`` of the test's own: hand it to the search (``fake_search``, or
    ``run(cfg, run_dir, trainer=...)``)."""
    return FakeTrainer()


@pytest.fixture(scope="session")
def features_data() -> DeviceData:
    """``data.features()``: 300 training rows of 12 features in 4 classes, on the device."""
    return data.device(data.features())


@pytest.fixture(scope="session")
def digits_data() -> DeviceData:
    """scikit-learn's digits, split as ``dataset=digits`` splits them, on the device."""
    return data.device(data.digits())


@pytest.fixture(scope="session")
def images_data() -> DeviceData:
    """``data.small_images()``: 60 training images of 8x8x1 in 3 classes, on the device."""
    return data.device(data.small_images())
