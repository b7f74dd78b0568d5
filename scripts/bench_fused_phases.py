"""Where a fused step's time goes: forward, backward and update, timed by phase.

Usage: python scripts/bench_fused_phases.py [--n 8] [--batch 32] [--steps 200] [--repeats 7]

Builds one fused pack of ``--n`` mlp3 members (digits, optimizers cycling as in
bench_pack.py) and times, per step and with XLA off and on: the forward pass with the loss,
forward and backward, and the whole training step (the pack's own compiled step, optimizer
update included); then one batched matmul of the first hidden layer's shape, against the
float32 matmul peak measured in the same run. Medians of interleaved repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_pack import make_members, matmul_peak_flops, train_flops

from packexp.data import digits
from packexp.models import mlp3
from packexp.packing import DeviceData
from packexp.packing.fused import FusedPack
from packexp.packing.fused_ops import Context
from packexp.telemetry import device_facts


def phase_fns(fused: FusedPack, xla: bool) -> dict:
    """Step functions running ``steps`` forward or forward+backward passes in one loop."""
    x_all, y_all = fused.data.x_train, fused.data.y_train
    n = fused.members_n

    def loss(idx, params):
        x = fused.graph.inputs(tf.gather(x_all, idx), shared=False)
        ctx = Context(n, params, training=True, active=tf.ones([n], tf.bool))
        per_row = keras.losses.sparse_categorical_crossentropy(
            tf.gather(y_all, idx), fused.graph(x, ctx), from_logits=True)
        return tf.reduce_sum(per_row)

    def forward(idx):
        return loss(idx, [v.read_value() for v in fused.graph.variables()])

    def backward(idx):
        params = [v.read_value() for v in fused.graph.variables()]
        with tf.GradientTape() as tape:
            tape.watch(params)
            total = loss(idx, params)
        return tf.add_n([tf.reduce_sum(g) for g in tape.gradient(total, params)])

    def looped(body):
        def run(idxs):
            def step(t, acc):
                return t + 1, acc + body(idxs[:, t])

            return tf.while_loop(lambda t, _: t < tf.shape(idxs)[1], step,
                                 (tf.constant(0), tf.constant(0.0)))[1]

        return tf.function(run, jit_compile=xla, autograph=False)

    return {"forward + loss": looped(forward), "forward + backward": looped(backward)}


def timed(fn, args, steps: int) -> float:
    """Milliseconds per step of one call of ``fn(*args)`` running ``steps`` steps."""
    t0 = time.perf_counter()
    out = fn(*args)
    np.asarray(out)
    return 1000 * (time.perf_counter() - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()

    data = DeviceData(digits.load())
    members = make_members(data, mlp3.build, args.n, args.batch)
    flops = sum(train_flops(m.model, args.batch) for m in members)
    rng = np.random.default_rng(0)
    idxs = rng.integers(0, data.train_size, (args.n, args.steps, args.batch), dtype=np.int32)
    ks = [args.steps] * args.n
    runs: dict[tuple[str, bool], list[float]] = {}
    fns = {}
    for xla in (False, True):
        fused = FusedPack(members, data, jit_compile=xla, width=args.steps)
        for name, fn in phase_fns(fused, xla).items():
            fns[name, xla] = (fn, (tf.constant(idxs),))
        fns["whole step (update included)", xla] = (
            lambda i, f=fused: f.run_chunk(i, ks), (idxs,))
        width = members[0].model.layers[0].units
        a = tf.random.uniform((args.n, args.batch, width))
        b = tf.random.uniform((args.n, width, width))

        def matmuls(a, b, steps=args.steps):
            def step(t, acc):
                return t + 1, acc + tf.reduce_sum(tf.matmul(a + tf.cast(t, tf.float32), b))

            return tf.while_loop(lambda t, _: t < steps, step, (0, 0.0))[1]

        fns[f"one batched matmul {[args.n, args.batch, width]} x {[args.n, width, width]}",
            xla] = (tf.function(matmuls, jit_compile=xla, autograph=False), (a, b))
    for fn, fargs in fns.values():  # compile and warm up
        timed(fn, fargs, args.steps)
    peaks = []
    for _ in range(args.repeats):
        peaks.append(matmul_peak_flops(reps=5))
        for key, (fn, fargs) in fns.items():
            runs.setdefault(key, []).append(timed(fn, fargs, args.steps))
    peak = statistics.median(peaks)
    console = Console(width=160)
    console.print(f"device: {device_facts()}")
    console.print(f"float32 matmul peak (1024x1024, median): {peak / 1e9:.1f} GFLOP/s; "
                  f"one training step of {args.n} mlp3 members at batch {args.batch}: "
                  f"{flops / 1e6:.2f} MFLOP")
    table = Table(title=f"fused step by phase, median of {args.repeats} ({args.steps} steps each)")
    for col in ("phase", "XLA off ms", "XLA on ms"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for name in dict.fromkeys(k for k, _ in runs):
        table.add_row(name, *(f"{statistics.median(runs[name, x]):.3f}" for x in (False, True)))
    console.print(table)
    mm = statistics.median(runs[next(k for k in runs if k[0].startswith("one batched") and k[1])])
    width = members[0].model.layers[0].units
    mm_flops = 2 * args.n * args.batch * width * width
    console.print(f"batched matmul under XLA: {mm_flops / (mm / 1000) / 1e9:.0f} GFLOP/s "
                  f"({mm_flops / (mm / 1000) / peak:.0%} of peak); a whole step at that rate "
                  f"would take {flops / (mm_flops / (mm / 1000)) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
