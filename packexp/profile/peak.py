"""The machine's float32 matmul peak, and the share of it a training step reaches."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from typing import Any

from packexp.packing import Member


@functools.cache
def matmul_peak_gflops(size: int = 2048, runs: int = 5) -> float:
    """GFLOP/s of one large float32 matmul on the default device, measured once per process.

    The best of ``runs`` after a warm-up: the most this device does for dense float32 work,
    against which a step's share says how much room packing has left to fill.
    """
    import tensorflow as tf

    a = tf.random.stateless_normal([size, size], seed=[0, 1])
    b = tf.random.stateless_normal([size, size], seed=[1, 2])
    matmul = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    matmul().numpy()
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        matmul().numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def forward_macs(model: Any) -> float | None:
    """Multiply-accumulates of one example's forward pass through the Dense and conv layers.

    None when the model has a layer whose cost this count does not know (then no share is
    claimed); activations, pooling and normalisation are left out, as they are not matmuls.
    """
    total = 0.0
    for layer in _layers(model):
        kind = type(layer).__name__
        if kind == "Dense":
            total += math.prod(layer.kernel.shape)
        elif kind in ("Conv2D", "DepthwiseConv2D"):
            # Every output pixel costs the whole kernel: (kh, kw, in / groups, out), or
            # (kh, kw, in, multiplier) for a depthwise one.
            out = layer.output.shape
            total += out[1] * out[2] * math.prod(layer.kernel.shape)
        elif kind in ("Conv1D", "Conv3D", "SeparableConv2D", "Conv2DTranspose", "LSTM", "GRU",
                      "MultiHeadAttention", "EinsumDense"):
            return None
    return total


def train_gflop(members: Sequence[Member]) -> float | None:
    """GFLOP of one training step of every member: 3 x forward (forward, two backward)."""
    total = 0.0
    for member in members:
        macs = forward_macs(member.model)
        if macs is None:
            return None
        total += 6 * macs * member.batch_size
    return total / 1e9


def peak_share(gflop: float | None, step_ms: float, peak_gflops: float) -> float | None:
    """The share of the matmul peak that ``gflop`` per step of ``step_ms`` reaches."""
    if gflop is None or not step_ms > 0:
        return None
    return gflop / (step_ms / 1000) / peak_gflops


def _layers(model: Any) -> list[Any]:
    out = []
    for layer in getattr(model, "layers", ()):
        out += _layers(layer) if hasattr(layer, "layers") else [layer]
    return out


def shares(members: Sequence[Member], ts_seq_ms: float, ts_pack_ms: float) -> dict[str, Any]:
    """A comparison's row cells: the matmul peak and each arm's share of it."""
    peak = matmul_peak_gflops()
    gflop = train_gflop(members)
    return {"matmul_peak_gflops": peak, "seq_peak_share": peak_share(gflop, ts_seq_ms, peak),
            "pack_peak_share": peak_share(gflop, ts_pack_ms, peak)}


def peak_note(rows: Sequence[dict[str, Any]]) -> str:
    """One line for a figure: the machine's matmul peak and the arms' shares of it."""
    from packexp.errors import is_number as finite

    peaks = [r["matmul_peak_gflops"] for r in rows if finite(r.get("matmul_peak_gflops"))]
    if not peaks:
        return ""
    text = f"float32 matmul peak {max(peaks):.0f} GFLOP/s"
    for arm, column in (("Ts(Seq)", "seq_peak_share"), ("Ts(Pack)", "pack_peak_share")):
        values = [100 * r[column] for r in rows if finite(r.get(column))]
        if values:
            text += f"; {arm} at {min(values):.0f}-{max(values):.0f}% of it"
    return text
