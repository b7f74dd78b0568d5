"""Shared fixtures: seeding, composed configs and tiny data."""

from __future__ import annotations

import copy
import functools
import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "conf")


@pytest.fixture(autouse=True)
def seed_everything() -> None:
    """Seeds Python, NumPy and TensorFlow (when imported) before every test."""
    random.seed(0)
    np.random.seed(0)
    import sys

    if "tensorflow" in sys.modules:
        import keras

        keras.utils.set_random_seed(0)


def compose_config(overrides: list[str] | None = None, *,
                   strategy: str | None = "knn") -> DictConfig:
    """The composed config under ``overrides``: a test's own copy, free to change.

    Unless ``overrides`` choose a strategy, tests run ``strategy`` (knn): it packs on every
    device, so the pack engine is exercised wherever the suite runs, where the default
    (cost) may plan only singles and first measures a calibration. ``strategy=None``
    composes the true default."""
    overrides = list(overrides or ())
    if strategy and not any(o.startswith("strategy=") for o in overrides):
        overrides.append(f"strategy={strategy}")
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    # A composition takes ~0.2 s and tests repeat override lists; callers get copies.
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


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
