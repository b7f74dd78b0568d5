"""Micro-benchmark: N members trained one at a time, then packed (Ts(Seq), Ts(Pack), IMPV).

Usage: python scripts/bench_pack.py [--model mlp3] [--n 1 2 4 8] [--batch 32] [--xla off on]
                                    [--fusion auto|on] [--grouped-conv auto|native|split]

Ts(Seq) trains each member alone in the same engine; every figure is the faster of XLA off
and on, so the baseline is never handicapped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from rich.console import Console
from rich.table import Table

from packexp.config import register_resolvers
from packexp.data import digits, synthetic
from packexp.models import needs_images
from packexp.packing import DeviceData, Member, Pack
from packexp.packing.program import why_not_fused
from packexp.space import Trial, derive_seed
from packexp.space.options import PackSettings
from packexp.telemetry import device_facts

OPTIMIZERS = ("adam", "sgd", "adagrad", "momentum")


def matmul_peak_flops(n: int = 1024, reps: int = 30) -> float:
    """Measured float32 matmul FLOP/s of this device (median of ``reps``)."""
    a = tf.random.uniform((n, n))
    b = tf.random.uniform((n, n))
    mm = tf.function(lambda a, b: tf.matmul(a, b))
    mm(a, b).numpy()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mm(a, b).numpy()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def train_flops(model, batch: int) -> float:
    """FLOPs of one training step: 3x the forward multiply-adds of Dense and conv layers."""
    forward = 0
    for layer in model.layers:
        if hasattr(layer, "layers"):
            forward += train_flops(layer, batch) / 3
            continue
        kernel = getattr(layer, "kernel", None)
        if kernel is None:
            kernel = getattr(layer, "depthwise_kernel", None)
        if kernel is None:
            continue
        out = layer.output.shape[1:-1]  # spatial positions (empty for Dense)
        positions = int(np.prod(out)) if len(out) else 1
        forward += 2 * batch * positions * int(np.prod(kernel.shape))
    return 3.0 * forward


def make_members(data, build, n, batch, seed=0):
    ds = data.dataset
    out = []
    for i in range(n):
        hp = {"batch_size": batch, "optimizer": OPTIMIZERS[i % len(OPTIMIZERS)],
              "learning_rate": 1e-3, "activation": "relu"}
        trial = Trial(f"m{i}", hp, (), seed=derive_seed(seed, i))
        out.append(Member.create(trial, build, ds.input_shape, ds.num_classes, data.train_size))
    return out


def timed_steps(members, data, steps: int, repeats: int, xla: bool,
                fusion: str = "off", grouped_conv: str = "auto") -> list[float]:
    """Step times of one pack over ``repeats`` chunks after a warm-up chunk (ms)."""
    pack = Pack(members, data,
                PackSettings(jit_compile=xla, chunk_steps=steps, fusion=fusion,
                             grouped_conv=grouped_conv))
    pack.train({m.trial_id: steps for m in members})
    return [pack.train({m.trial_id: steps for m in members}).step_time_ms
            for _ in range(repeats)]


def measure(members, data, steps: int, repeats: int, xla: bool,
            fusion: str | None, grouped_conv: str = "auto"
            ) -> tuple[float, float, float | None]:
    """Median Ts(Seq) (each member alone, summed), Ts(Pack) and Ts(Fused), interleaved.

    Each repeat times every member alone, then the plain pack, then the fused pack, so all
    see the same machine load; the medians of the per-repeat figures are returned.
    """
    seq, packed, fusedt = [], [], []
    singles = [[m] for m in members]
    for _ in range(repeats):
        seq.append(sum(timed_steps(s, data, steps, 1, xla)[0] for s in singles))
        packed.append(timed_steps(members, data, steps, 1, xla)[0])
        if fusion:
            fusedt.append(timed_steps(members, data, steps, 1, xla, fusion=fusion,
                                      grouped_conv=grouped_conv)[0])
    return (statistics.median(seq), statistics.median(packed),
            statistics.median(fusedt) if fusedt else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp3")
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200, help="steps per timed chunk")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--image-size", type=int, default=32, help="synthetic images for CNNs")
    p.add_argument("--override", nargs="*", default=[], help="Hydra overrides of the model")
    p.add_argument("--xla", nargs="+", default=["off", "on"], choices=["off", "on"],
                   help="XLA settings to try; each figure takes the faster")
    p.add_argument("--fusion", default="auto", choices=["auto", "on"],
                   help="fusion mode of the fused column; 'on' fuses CNNs on a CPU too")
    p.add_argument("--grouped-conv", default="auto", choices=["auto", "native", "split"],
                   help="how the fused column's Conv2D layers run (pack.grouped_conv)")
    args = p.parse_args()
    args.xla = [x == "on" for x in args.xla]

    conf = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        register_resolvers()
        cfg = compose(config_name="config", overrides=[f"model={args.model}", *args.override])
    build = instantiate(cfg.model)
    if not needs_images(build):
        data = DeviceData(digits.load())
    else:
        s = args.image_size
        data = DeviceData(synthetic.load(shape=[s, s, 3], train_size=max(1024, 4 * args.batch)))
    peak = matmul_peak_flops()
    console = Console(width=200)
    console.print(f"device: {device_facts()}")
    console.print(f"float32 matmul peak (1024x1024, median): {peak / 1e9:.1f} GFLOP/s")
    table = Table(title=f"{args.model}, batch {args.batch}, {args.steps} steps per chunk, "
                        f"median of {args.repeats}")
    columns = ["N", "Ts(Seq) ms", "seq xla", "Ts(Pack) ms", "pack xla", "Seq/Pack", "IMPV",
               "pack GFLOP/s", "% of peak"]
    reason = why_not_fused(make_members(data, build, 2, args.batch), "gather", args.fusion)
    fusable = reason is None
    if not fusable:
        console.print(f"no fused column: {reason}")
    if fusable:
        columns += ["Ts(Fused) ms", "fused xla", "Seq/Fused", "fused GFLOP/s", "% of peak "]
    for col in columns:
        table.add_column(col, justify="right")
    for n in args.n:
        members = make_members(data, build, n, args.batch)
        runs = {xla: measure(members, data, args.steps, args.repeats, xla,
                             args.fusion if fusable else None, args.grouped_conv)
                for xla in args.xla}
        seq_xla = min(runs, key=lambda x: runs[x][0])
        pack_xla = min(runs, key=lambda x: runs[x][1])
        ts_seq, ts_pack = runs[seq_xla][0], runs[pack_xla][1]
        flops = sum(train_flops(m.model, args.batch) for m in members)
        achieved = flops / (ts_pack / 1000)
        row = [str(n), f"{ts_seq:.3f}", "on" if seq_xla else "off", f"{ts_pack:.3f}",
               "on" if pack_xla else "off", f"{ts_seq / ts_pack:.2f}",
               f"{(ts_seq - ts_pack) / ts_seq:.1%}", f"{achieved / 1e9:.2f}",
               f"{achieved / peak:.1%}"]
        if fusable:
            fused_xla = min(runs, key=lambda x: runs[x][2])
            ts_fused = runs[fused_xla][2]
            fused_rate = flops / (ts_fused / 1000)
            row += [f"{ts_fused:.3f}", "on" if fused_xla else "off", f"{ts_seq / ts_fused:.2f}",
                    f"{fused_rate / 1e9:.2f}", f"{fused_rate / peak:.1%}"]
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
