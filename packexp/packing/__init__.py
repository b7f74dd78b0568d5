"""The pack engine: the only place that builds TensorFlow step functions.

``TensorFlowTrainer`` (``engine.py``) is its face to the search. Importing the package loads
no TensorFlow: ``DeviceData``, ``Member``, ``Pack`` and the rest load when first used.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

# Each pack compiles its own step function by design; TensorFlow's retracing advice is noise.
logging.getLogger("tensorflow").setLevel(logging.ERROR)

_LAZY = {"DeviceData": "packexp.packing.data", "batch_indices": "packexp.packing.data",
         "Member": "packexp.packing.member", "Evaluation": "packexp.packing.runs",
         "Pack": "packexp.packing.pack", "PackStats": "packexp.packing.runs",
         "PackRun": "packexp.packing.runs", "MemberResult": "packexp.packing.runs",
         "TensorFlowTrainer": "packexp.packing.engine"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'packexp.packing' has no attribute {name!r}")
