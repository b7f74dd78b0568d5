"""Fixtures for every test module: seeding, a fast tune config and the GPU skip."""

from __future__ import annotations

import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from omegaconf import DictConfig, open_dict

from tests.helpers import compose_config


@pytest.fixture(autouse=True)
def seed_everything() -> None:
    """Seeds Python, NumPy and TensorFlow (when imported) before every test."""
    random.seed(0)
    np.random.seed(0)
    import sys

    if "tensorflow" in sys.modules:
        import keras

        keras.utils.set_random_seed(0)


@pytest.fixture
def cfg_tune(tmp_path) -> DictConfig:
    """A fast tune config whose MLflow store lives in ``tmp_path``."""
    cfg = compose_config(["experiment=quick", "tracking=mlflow"])
    with open_dict(cfg):
        cfg.tracking.store_dir = str(tmp_path / "store")
    return cfg


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # At set-up, not collection: asking TensorFlow then keeps its CUDA log in the capture.
    if "gpu" in item.keywords:
        from packexp.telemetry import gpu_device

        if gpu_device() is None:
            item.add_marker(pytest.mark.skip(reason="needs a GPU"))
