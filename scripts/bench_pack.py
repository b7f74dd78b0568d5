"""Micro-benchmark: N members trained one at a time, then packed (Ts(Seq), Ts(Pack), IMPV).

Usage: python scripts/bench_pack.py [--model mlp3] [--n 1 2 4 8] [--batch 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from rich.console import Console
from rich.table import Table

from packexp.data import digits, synthetic
from packexp.packing import DeviceData, Member, Pack
from packexp.search_space import Trial, derive_seed

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


def dense_train_flops(model, batch: int) -> float:
    """Forward + backward FLOPs of one step of the Dense layers (3x the forward matmuls)."""
    forward = sum(2 * batch * w.shape[0] * w.shape[1] for w in model.trainable_weights
                  if len(w.shape) == 2)
    return 3.0 * forward


def make_members(data, build, n, batch, seed=0):
    ds = data.dataset
    out = []
    for i in range(n):
        hp = {"batch_size": batch, "optimizer": OPTIMIZERS[i % 4], "learning_rate": 1e-3,
              "activation": "relu"}
        trial = Trial(f"m{i}", hp, (), seed=derive_seed(seed, i))
        out.append(Member.create(trial, build, ds.input_shape, ds.num_classes, data.train_size))
    return out


def step_ms(members, data, steps: int, repeats: int, xla: bool) -> float:
    """Median time of one pack step, after one warm-up chunk."""
    pack = Pack(members, data, jit_compile=xla, chunk_steps=steps)
    pack.train({m.trial_id: steps for m in members})
    times = [pack.train({m.trial_id: steps for m in members}).step_time_ms
             for _ in range(repeats)]
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp3")
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200, help="steps per timed chunk")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--image-size", type=int, default=32, help="synthetic images for CNNs")
    p.add_argument("--override", nargs="*", default=[], help="Hydra overrides of the model")
    args = p.parse_args()

    conf = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"model={args.model}", *args.override])
    build = instantiate(cfg.model)
    if args.model == "mlp3":
        data = DeviceData(digits.load())
    else:
        s = args.image_size
        data = DeviceData(synthetic.load(shape=[s, s, 3], train_size=max(1024, 4 * args.batch)))
    peak = matmul_peak_flops()
    console = Console(width=140)
    console.print(f"float32 matmul peak (1024x1024, median): {peak / 1e9:.1f} GFLOP/s")
    table = Table(title=f"{args.model}, batch {args.batch}, {args.steps} steps per chunk, "
                        f"median of {args.repeats}")
    for col in ("N", "Ts(Seq) ms", "seq xla", "Ts(Pack) ms", "pack xla", "Seq/Pack", "IMPV",
                "pack GFLOP/s", "% of peak"):
        table.add_column(col, justify="right")
    for n in args.n:
        members = make_members(data, build, n, args.batch)
        single = {xla: [step_ms([m], data, args.steps, args.repeats, xla) for m in members]
                  for xla in (False, True)}
        seq_xla = min(single, key=lambda x: sum(single[x]))
        ts_seq = sum(single[seq_xla])
        packed = {xla: step_ms(members, data, args.steps, args.repeats, xla)
                  for xla in (False, True)}
        pack_xla = min(packed, key=packed.get)
        ts_pack = packed[pack_xla]
        flops = sum(dense_train_flops(m.model, args.batch) for m in members)
        achieved = flops / (ts_pack / 1000)
        table.add_row(str(n), f"{ts_seq:.3f}", "on" if seq_xla else "off", f"{ts_pack:.3f}",
                      "on" if pack_xla else "off", f"{ts_seq / ts_pack:.2f}",
                      f"{(ts_seq - ts_pack) / ts_seq:.1%}", f"{achieved / 1e9:.2f}",
                      f"{achieved / peak:.1%}")
    console.print(table)
    if args.model != "mlp3":
        console.print("GFLOP/s counts Dense layers only; convolutions are not counted.")


if __name__ == "__main__":
    main()
