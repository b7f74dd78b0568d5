"""oneDNN's custom operations on, on every machine: the isolation checks and the fused CNN's
native grouped convolutions.

The suite runs TensorFlow with them off (``tests/conftest.py``): TensorFlow turns them on by
default on some x86 CPUs only, so the suite's results, and which of its tests skip, would
otherwise depend on the CPU. A user's TensorFlow may run them, so these checks run again
here, in a pytest process of their own with ``TF_ENABLE_ONEDNN_OPTS=1``:
- plain packs of MLPs, misaligned, and the small CNN with BatchNorm, bit for bit against each
  member alone;
- fused CNN packs on the native grouped-convolution path, which only oneDNN can
  differentiate on a CPU (``test_fused_cnn.py``'s ``native`` cases skip in the suite; its
  ``split`` cases run there).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from packexp.testing.config import ROOT

ISOLATION = [
    "tests/engine/test_packing.py::test_packed_equals_alone",
    "tests/engine/test_packing.py::test_pack_mates_do_not_matter",
    "tests/engine/test_cnn_pack.py::test_packed_cnn_ends_bit_identical_to_alone",
]
NATIVE = "tests/engine/test_fused_cnn.py"  # its cases named native (-k)
ON = "tests/engine/test_onednn.py::test_onednn_is_on_exactly_where_asked"


@pytest.mark.process
def test_with_onednn_on():
    """One pytest process (a TensorFlow import, a collection) for all of them: ON; the
    isolation checks (test_packed_equals_alone: mask and switch; the small CNN and cnn1d:
    one case per member); and the fused CNN's native cases (fused against plain alone,
    fused alone against fused packed (twice), native against split, auto's choice, a
    finished member's statistics)."""
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    names = " or ".join(["native", *(test.split("::")[1] for test in [ON, *ISOLATION])])
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-m", "not paper_cnns", "-k", names, ON, *ISOLATION, NATIVE],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    summary = [line for line in out.stdout.splitlines() if " passed" in line]
    # ON, the isolation checks (mask, switch, pack-mates; the small CNN's and cnn1d's two
    # members each) and the six native cases.
    assert summary and " 14 passed, " in summary[-1], out.stdout[-2000:]
    assert "skipped" not in summary[-1], summary[-1]  # nothing fell back to the split path
    passed = [line.split("::")[0] for line in out.stdout.splitlines() if " PASSED" in line]
    assert passed.count(NATIVE) == 6, out.stdout[-3000:]  # and 6 of ON and ISOLATION
