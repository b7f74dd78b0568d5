"""Fixtures for every test module: seeding, a fast tune config and the GPU skip."""

from __future__ import annotations

import os
import random
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from omegaconf import DictConfig, open_dict

from tests.helpers import ROOT, compose_config, ray_processes, wait_until

pytest_plugins = ["packexp.testing.fixtures"]


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


@pytest.fixture
def ray_env(tmp_path):
    """Environment of a run on Ray: its files in a short temporary directory (its socket
    paths must stay short), HOME in ``tmp_path``; afterwards no process of that Ray is left."""
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "HOME": str(home),
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    yield env
    assert wait_until(lambda: not ray_processes(ray_tmp), 30), ray_processes(ray_tmp)
    assert not [p for p in home.rglob("*") if "ray" in p.name.lower()]
    shutil.rmtree(ray_tmp, ignore_errors=True)
