"""Device facts (whether there is a GPU among them), memory readings and a resource sampler:
the only module that talks to NVML."""

from __future__ import annotations

import functools
import logging
import platform
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)


@functools.cache
def _nvml_init() -> tuple[Any, str | None]:
    """The initialised ``pynvml`` module and None, or None and why there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            raise RuntimeError("no NVIDIA device")
        return pynvml, None
    except Exception as e:
        return None, str(e) or type(e).__name__


@functools.cache
def _nvml():
    """The initialised ``pynvml`` module, or None without a usable NVIDIA driver (said once)."""
    nvml, reason = _nvml_init()
    if nvml is None:
        log.info("no GPU telemetry (%s); using host memory and the configured budget", reason)
    return nvml


_gpu_index = 0  # NVML's index of this process's GPU


def use_gpu_index(index: int) -> None:
    """Makes NVML readings follow GPU ``index`` (a Ray actor's, from its runtime context)."""
    global _gpu_index
    _gpu_index = index


@dataclass(frozen=True)
class DeviceFacts:
    """What the machine is, as far as it changes speed or numerics: logged and tagged once.

    Attributes:
        cpu: The CPU model, as the OS names it.
        onednn: Whether TensorFlow's oneDNN CPU kernels are on (TensorFlow decides at import
            from the CPU and ``TF_ENABLE_ONEDNN_OPTS``); None when it cannot tell.
        gpus: TensorFlow's GPUs, by model.
    """

    cpu: str
    onednn: bool | None
    gpus: tuple[str, ...]

    def tags(self) -> dict[str, str]:
        return {"device.cpu": self.cpu,
                "device.onednn": "unknown" if self.onednn is None else str(self.onednn).lower(),
                "device.gpus": ", ".join(self.gpus) or "none"}

    def __str__(self) -> str:
        onednn = {True: "on", False: "off", None: "unknown"}[self.onednn]
        return f"CPU {self.cpu}, oneDNN {onednn}, GPUs: {', '.join(self.gpus) or 'none'}"


@functools.cache
def gpu_device() -> str | None:
    """The GPU TensorFlow computes on, ``"GPU:0"``, or None on a CPU (imports TensorFlow).

    packexp's one answer to "is there a GPU?"; NVML may see a GPU that TensorFlow cannot use.
    """
    import tensorflow as tf

    return "GPU:0" if tf.config.list_logical_devices("GPU") else None


@functools.cache
def device_facts() -> DeviceFacts:
    """This process's ``DeviceFacts`` (imports TensorFlow)."""
    import tensorflow as tf

    try:
        from tensorflow.python.util import _pywrap_util_port

        onednn: bool | None = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        onednn = None
    gpus = tuple(_gpu_model(d) for d in tf.config.list_physical_devices("GPU"))
    return DeviceFacts(cpu=_cpu_model(), onednn=onednn, gpus=gpus)


def _gpu_model(device) -> str:
    """A GPU's model as TensorFlow names it ("NVIDIA A100-SXM4-40GB"), else its device name."""
    import tensorflow as tf

    try:
        return tf.config.experimental.get_device_details(device).get("device_name", device.name)
    except (ValueError, RuntimeError):
        return device.name


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def grouped_conv_gradients() -> bool:
    """Whether TensorFlow can differentiate a grouped convolution on the default device.

    CPUs do it through oneDNN only: where TensorFlow leaves oneDNN off (AMD EPYC with AVX2
    and no AVX-512, say), ``Conv2DBackpropInput`` rejects grouped filters. Probed once per
    process with a tiny traced convolution, the way a pack's step runs it.
    """
    import tensorflow as tf

    @tf.function(autograph=False)
    def gradients(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = tf.nn.conv2d(x, kernel, strides=1, padding="SAME")
        return tape.gradient(y, [x, kernel])

    try:
        gradients(tf.ones([1, 3, 3, 4]), tf.ones([3, 3, 2, 4]))  # two groups of two channels
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
        log.info("grouped convolutions have no gradient here (%s)",
                 str(e).splitlines()[0][:120])
        return False


def gpu_memory(index: int | None = None) -> tuple[int, int] | None:
    """(total, free) bytes of GPU ``index`` (this process's by default) from NVML, or None
    without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    index = _gpu_index if index is None else index
    info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
    return int(info.total), int(info.free)


_gpu_cap: int | None = None  # bytes TensorFlow may hold on this process's GPU, when capped
_free_at_start: int | None = None  # the GPU's free bytes before TensorFlow claimed any
_gpu_left = False  # whether this process's TensorFlow was kept off the GPU


def leave_gpu() -> None:
    """Keeps this process's TensorFlow off the GPU (before TensorFlow starts): Ray workers
    train. Packs here, if any, are planned as on a CPU. Raises TensorFlow's RuntimeError when
    TensorFlow has already started on a GPU."""
    global _gpu_left
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")
    _gpu_left = True


def gpu_left() -> bool:
    return _gpu_left


def cap_gpu_memory(limit_bytes: int) -> None:
    """Records the cap set on this process's TensorFlow GPU memory (a Ray actor's share)."""
    global _gpu_cap
    _gpu_cap = int(limit_bytes)


def note_free_gpu_memory() -> None:
    """Reads the GPU's free memory now, before TensorFlow runs on it.

    At its first GPU allocation TensorFlow maps nearly all the free memory, which NVML then
    reads as used; ``gpu_budget`` answers with this reading instead. A no-op without a GPU.
    """
    global _free_at_start
    if _nvml_init()[0] is None:
        return  # said where it matters, once a run asks for GPU memory
    memory = gpu_memory()
    if memory is not None and _free_at_start is None:
        _free_at_start = memory[1]


def gpu_budget() -> tuple[int, str] | None:
    """Bytes this process's TensorFlow may hold on its GPU, and where the figure comes from;
    None without a GPU.

    A capped process (``cap_gpu_memory``) has its cap; otherwise the free memory read by
    ``note_free_gpu_memory`` before TensorFlow started, or read now.
    """
    memory = gpu_memory()
    if memory is None or _gpu_left:
        return None
    if _gpu_cap is not None:
        return _gpu_cap, f"this worker's {_gpu_cap / 2**20:.0f} MB share of its GPU"
    free = memory[1] if _free_at_start is None else _free_at_start
    return free, f"{free / 2**20:.0f} MB free GPU memory"


def gpu_utilization(index: int | None = None) -> float | None:
    """GPU busy percentage from NVML, or None without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    index = _gpu_index if index is None else index
    return float(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(index)).gpu)


def host_rss() -> int:
    return int(psutil.Process().memory_info().rss)


def peak_rss() -> int:
    """The process's peak resident set in bytes (``getrusage``'s ``ru_maxrss``): since it
    started, or since a ``PeakMemory`` span reset it (Linux); its RSS now where there is no
    ``resource`` module."""
    try:
        import resource
    except ImportError:
        return host_rss()
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


class PeakMemory:
    """Peak allocated memory over a span of work.

    On a GPU it is TensorFlow's allocator peak (allocated bytes, not the pool NVML sees as
    used). On a CPU it is the process's peak resident set (Linux ``VmHWM``, reset at the
    start of the span), or the larger of the RSS at start and end elsewhere. On either,
    ``rss_bytes`` is the process's peak resident set (``peak_rss``): over the span where
    Linux lets it be reset, since the process started elsewhere.
    """

    _STATUS = Path("/proc/self/status")
    _CLEAR = Path("/proc/self/clear_refs")

    def __init__(self) -> None:
        self._gpu = gpu_device()
        self._start = 0
        self._hwm = False
        self.peak_bytes = 0
        self.rss_bytes = 0

    def __enter__(self) -> PeakMemory:
        try:
            self._CLEAR.write_text("5")  # resets VmHWM (and ru_maxrss) to the current RSS
            self._hwm = True
        except OSError:
            self._hwm = False
        if self._gpu:
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats(self._gpu)
            self._start = int(tf.config.experimental.get_memory_info(self._gpu)["current"])
            return self
        self._start = host_rss()
        return self

    def __exit__(self, *exc) -> None:
        self.peak_bytes = self._read()
        self.rss_bytes = peak_rss()

    @property
    def on_gpu(self) -> bool:
        """Whether the span's peak is the GPU allocator's."""
        return self._gpu is not None

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


def tf_gpu_name() -> str | None:
    """The name of the GPU TensorFlow trains on, or None where it sees no GPU."""
    if gpu_device() is None:
        return None
    import tensorflow as tf

    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    return str(details.get("device_name", "GPU"))


@dataclass(frozen=True)
class ResourceSample:
    """One reading: wall-clock time, host RSS, and the GPU's memory and load when there is one."""

    timestamp_ms: int
    host_rss_mb: float
    gpu_memory_used_mb: float | None = None
    gpu_utilization_pct: float | None = None

    def metrics(self) -> dict[str, float]:
        values = {"host_rss_mb": self.host_rss_mb,
                  "gpu_memory_used_mb": self.gpu_memory_used_mb,
                  "gpu_utilization_pct": self.gpu_utilization_pct}
        return {k: v for k, v in values.items() if v is not None}


def sample_resources(index: int | None = None) -> ResourceSample:
    """Host RSS, plus GPU ``index``'s used memory and utilisation from NVML when it exists."""
    memory = gpu_memory(index)
    return ResourceSample(
        timestamp_ms=int(time.time() * 1000),
        host_rss_mb=round(host_rss() / 2**20, 2),
        gpu_memory_used_mb=None if memory is None else round((memory[0] - memory[1]) / 2**20, 2),
        gpu_utilization_pct=gpu_utilization(index),
    )


class ResourceSampler:
    """Samples ``sample_resources`` every ``interval_s`` seconds on a daemon thread.

    Readings queue up until ``drain`` takes them, so whoever logs them does so on its own
    thread. Without a GPU the readings hold host RSS only (NVML's absence is logged once).

    Args:
        interval_s: Seconds between readings.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s!r}: must be a positive number of seconds")
        self.interval_s = float(interval_s)
        self._samples: list[ResourceSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ResourceSampler:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="packexp-telemetry",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def drain(self) -> list[ResourceSample]:
        """The readings taken since the last drain, oldest first."""
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        while True:
            try:
                sample = sample_resources()
            except Exception as e:  # a telemetry hiccup must never stop training
                log.debug("resource sample failed: %s", e)
            else:
                with self._lock:
                    self._samples.append(sample)
            if self._stop.wait(self.interval_s):
                return
