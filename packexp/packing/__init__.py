"""The pack engine: the only place that builds TensorFlow step functions."""

import logging

from packexp.packing.data import DeviceData, batch_indices
from packexp.packing.member import Member
from packexp.packing.pack import Evaluation, Pack, PackStats

# Each pack compiles its own step function by design; TensorFlow's retracing advice is noise.
logging.getLogger("tensorflow").setLevel(logging.ERROR)

__all__ = ["DeviceData", "Evaluation", "Member", "Pack", "PackStats", "batch_indices"]
