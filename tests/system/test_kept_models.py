"""A kept model (``keep_models``) in a process of its own: plain Keras loads the search's
best model where packexp is never imported. The in-process checks are
tests/engine/test_kept_models.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.datasets import load_digits

import packexp
from packexp.data import split

pytestmark = pytest.mark.tf

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking
PLAIN = {"fusion": "off", "jit_compile": False}  # exact: plain packs, no XLA


def raw_validation(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The digits' validation rows as ``packexp.tune(data=(x, y))`` splits them, raw."""
    digits = load_digits()
    data = split("raw", digits.data, digits.target, 0.2, seed, num_classes=10)
    return data.x_val, data.y_val


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> packexp.SearchResult:
    digits = load_digits()
    return packexp.tune(data=(digits.data, digits.target), **QUICK, pack=PLAIN,
                        run_dir=tmp_path_factory.mktemp("plain") / "run")


@pytest.mark.process
def test_plain_keras_loads_it_in_a_process_that_never_imports_packexp(plain, tmp_path):
    x_val, _ = raw_validation()
    np.save(tmp_path / "rows.npy", x_val)
    script = textwrap.dedent(f"""
        import sys, numpy as np, keras
        model = keras.saving.load_model({str(plain.run_dir / plain.best["model"])!r})
        rows = np.load({str(tmp_path / "rows.npy")!r})
        np.save({str(tmp_path / "out.npy")!r}, model.predict(rows, verbose=0))
        assert not any(m.split(".")[0] == "packexp" for m in sys.modules), "imported packexp"
        """)
    # Not from the checkout's directory, where packexp would be importable; with this
    # process's TensorFlow settings (the suite's oneDNN setting: its kernels round otherwise).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "out.npy"),
                          plain.best_model().predict(x_val, verbose=0))
