"""Step times of the issue's reference packs on digits mlp3, for comparing two trees in one run.

Usage: python scripts/bench_step.py [--threads N] [--xla off|on|auto] [--repeats 7] [--steps 300]

Cases (medians of interleaved repeats, ms per pack step, after a warm-up chunk):
- ``single``: one member, batch 45, Adam, ReLU;
- ``fused8-same``: 8 members with those hyper-parameters, fused;
- ``fused8-mixed``: 8 members as ``knn`` forms them (batch 20-70, four optimizers, four
  activations), fused;
- ``plain8-mixed``: the same 8 in a plain pack.

It uses only ``Member.create``, ``Pack`` and ``PackStats``, so the same file times an earlier
tree too: ``PYTHONPATH=/path/to/old/tree python scripts/bench_step.py``. ``--threads`` sets
TensorFlow's intra-op and inter-op thread counts before anything runs (default 0:
TensorFlow's default; -1: leave them as set before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

OPTIMIZERS = ("adam", "sgd", "adagrad", "momentum")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "leaky_relu")
MIXED_BATCHES = (20, 70, 45, 30, 60, 25, 50, 35)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--xla", default="off", choices=["off", "on", "auto"])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--cases", nargs="+",
                   default=["single", "fused8-same", "fused8-mixed", "plain8-mixed"])
    p.add_argument("--bucket", type=int, default=None,
                   help="pack.batch_bucket: pad batches to this size (a tree that has it)")
    p.add_argument("--json", action="store_true", help="print one JSON line instead")
    args = p.parse_args()

    import tensorflow as tf

    if args.threads >= 0:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    from packexp.data import digits
    from packexp.models import mlp3
    from packexp.packing import DeviceData, Member, Pack
    from packexp.space import Trial, derive_seed
    from packexp.space.options import PackSettings

    data = DeviceData(digits.load())
    ds = data.dataset

    def members(n: int, mixed: bool) -> list:
        out = []
        for i in range(n):
            hp = {"batch_size": MIXED_BATCHES[i] if mixed else 45,
                  "optimizer": OPTIMIZERS[i % 4] if mixed else "adam",
                  "learning_rate": 1e-3,
                  "activation": ACTIVATIONS[(i // 2) % 4] if mixed else "relu"}
            trial = Trial(f"m{i}", hp, (), seed=derive_seed(0, i))
            out.append(Member.create(trial, mlp3.build, ds.input_shape, ds.num_classes,
                                     data.train_size))
        return out

    jit = {"off": False, "on": True, "auto": "auto"}[args.xla]
    cases = {
        "single": (members(1, False), "off"),
        "fused8-same": (members(8, False), "on"),
        "fused8-mixed": (members(8, True), "on"),
        "plain8-mixed": (members(8, True), "off"),
    }
    packs = {}
    for name in args.cases:
        ms, fusion = cases[name]
        extra = {"batch_bucket": args.bucket} if args.bucket else {}
        pack = Pack(ms, data,
                    PackSettings(fusion=fusion, jit_compile=jit, chunk_steps=args.steps, **extra))
        pack.train({m.trial_id: args.steps for m in ms})  # warm-up: trace and compile
        packs[name] = pack
    times: dict[str, list[float]] = {name: [] for name in packs}
    for _ in range(args.repeats):
        for name, pack in packs.items():
            stats = pack.train({m.trial_id: args.steps for m in pack.members})
            times[name].append(stats.step_time_ms)
    medians = {name: statistics.median(t) for name, t in times.items()}
    if args.json:
        print(json.dumps(medians))
        return
    print(f"python {sys.version.split()[0]}, tensorflow {tf.__version__}, threads "
          f"intra {tf.config.threading.get_intra_op_parallelism_threads()} inter "
          f"{tf.config.threading.get_inter_op_parallelism_threads()}, xla {args.xla}")
    for name, t in times.items():
        per_member = medians[name] / len(packs[name].members)
        print(f"{name:14s} {medians[name]:.4f} ms/step ({per_member:.4f} per member)  "
              f"range {min(t):.4f}-{max(t):.4f}")


if __name__ == "__main__":
    main()
