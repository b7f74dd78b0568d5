"""Device facts and memory readings: the only module that talks to NVML."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


@functools.cache
def _nvml():
    """The initialised ``pynvml`` module, or None without a usable NVIDIA driver (said once)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            raise RuntimeError("no NVIDIA device")
        return pynvml
    except Exception as e:
        log.info("no GPU telemetry (%s); using host memory and the configured budget",
                 str(e) or type(e).__name__)
        return None


def gpu_available() -> bool:
    return _nvml() is not None


def gpu_memory(index: int = 0) -> tuple[int, int] | None:
    """(total, free) bytes of GPU ``index`` from NVML, or None without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
    return int(info.total), int(info.free)


def gpu_utilization(index: int = 0) -> float | None:
    """GPU busy percentage from NVML, or None without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    return float(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(index)).gpu)


def host_rss() -> int:
    return int(psutil.Process().memory_info().rss)


class PeakMemory:
    """Peak allocated memory over a span of work.

    On a GPU it is TensorFlow's allocator peak (allocated bytes, not the pool NVML sees as
    used). On a CPU it is the process's peak resident set (Linux ``VmHWM``, reset at the
    start of the span), or the larger of the RSS at start and end elsewhere.
    """

    _STATUS = Path("/proc/self/status")
    _CLEAR = Path("/proc/self/clear_refs")

    def __init__(self) -> None:
        self._gpu = _tf_gpu()
        self._start = 0
        self._hwm = False
        self.peak_bytes = 0

    def __enter__(self) -> PeakMemory:
        if self._gpu:
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats(self._gpu)
            self._start = int(tf.config.experimental.get_memory_info(self._gpu)["current"])
            return self
        self._start = host_rss()
        try:
            self._CLEAR.write_text("5")  # resets VmHWM to the current RSS
            self._hwm = True
        except OSError:
            self._hwm = False
        return self

    def __exit__(self, *exc) -> None:
        self.peak_bytes = self._read()

    def _read(self) -> int:
        if self._gpu:
            import tensorflow as tf

            return int(tf.config.experimental.get_memory_info(self._gpu)["peak"])
        if self._hwm:
            for line in self._STATUS.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return max(self._start, host_rss())

    @property
    def growth_bytes(self) -> int:
        """How far the peak rose above the memory in use when the span began."""
        return max(0, self.peak_bytes - self._start)


@functools.cache
def _tf_gpu() -> str | None:
    import tensorflow as tf

    return "GPU:0" if tf.config.list_logical_devices("GPU") else None
