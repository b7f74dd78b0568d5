"""The isolation invariant with oneDNN's custom operations on, on every machine.

The suite runs TensorFlow with them off (``tests/conftest.py``): TensorFlow turns them on by
default on some x86 CPUs only, so the suite's results would otherwise depend on the CPU. A
user's TensorFlow may run them, so the isolation checks run again here, in a pytest process
of their own with ``TF_ENABLE_ONEDNN_OPTS=1``: plain packs of MLPs, misaligned, and the
small CNN with BatchNorm, bit for bit against each member alone.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

ISOLATION = [
    "tests/test_packing.py::test_packed_equals_alone",
    "tests/test_packing.py::test_pack_mates_do_not_matter",
    "tests/test_cnn_pack.py::test_packed_cnn_ends_bit_identical_to_alone",
]
ON = "tests/test_onednn.py::test_onednn_is_on_exactly_where_asked"


@pytest.mark.tf
def test_onednn_is_on_exactly_where_asked():
    """Off in the suite (conftest's setting took hold before TensorFlow loaded); on in the
    process the test below starts."""
    from tensorflow.python.util import _pywrap_util_port

    assert _pywrap_util_port.IsMklEnabled() == (os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1")


@pytest.mark.process
def test_plain_packs_equal_training_alone_with_onednn_on():
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-m", "not paper_cnns", ON, *ISOLATION],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    passed = [line for line in out.stdout.splitlines() if " passed" in line]
    # test_packed_equals_alone: mask and switch; the small CNN: one case per member.
    assert passed and passed[-1].startswith("6 passed"), out.stdout[-2000:]
