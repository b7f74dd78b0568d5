"""oneDNN's custom operations: off in the suite (``tests/conftest.py``), on exactly where asked.
The isolation checks and the fused CNN's native grouped convolutions with them on run in a
pytest process of their own, tests/system/test_onednn.py, which runs this module's test too."""

from __future__ import annotations

import os

import pytest


@pytest.mark.tf
def test_onednn_is_on_exactly_where_asked():
    """Off in the suite (conftest's setting took hold before TensorFlow loaded); on in the
    process tests/system/test_onednn.py starts."""
    from tensorflow.python.util import _pywrap_util_port

    assert _pywrap_util_port.IsMklEnabled() == (os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1")
