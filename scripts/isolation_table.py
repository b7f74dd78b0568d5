"""The isolation table: does a member trained in a pack end with its alone-trained weights?

Usage: python scripts/isolation_table.py [--epochs 2] [--bucket 70]

For each mode (plain or fused; XLA or not; a program built fresh or one reused from an
earlier pack of other trials), eight mlp3 members on digits, of mixed batch sizes (20-70),
optimizers (all four rules), activations and learning-rate schedules, train one rung in one
pack through ``PackCache`` and ``train_group`` as a search trains them; each is also trained
alone (plain, in the same XLA mode and batch bucket, fresh). It prints, per mode, how many
members end bit-identical to alone (weights and optimizer state) and the largest absolute
difference in a weight and in validation accuracy.
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from packexp.data import digits
from packexp.models import mlp3, runtime_hparams
from packexp.packing import DeviceData, Member
from packexp.packing.cache import PackCache
from packexp.packing.trainer import train_group
from packexp.space import Trial, derive_seed

OPTIMIZERS = ("adam", "sgd", "adagrad", "momentum")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "leaky_relu")
SCHEDULES = ("constant", "cosine")
BATCHES = (20, 70, 45, 30, 60, 25, 50, 35)


def trials(first: int) -> list[Trial]:
    out = []
    for i in range(8):
        hp = {"batch_size": BATCHES[i], "optimizer": OPTIMIZERS[i % 4],
              "learning_rate": (1e-3, 1e-2, 1e-1, 1e-2)[i % 4],
              "activation": ACTIVATIONS[(i // 2) % 4], "lr_schedule": SCHEDULES[i % 2]}
        out.append(Trial(f"t{first + i}", hp, (), seed=derive_seed(7, first + i)))
    return out


def cache(data: DeviceData, fusion: str, xla: bool, bucket: int | None) -> PackCache:
    build = functools.partial(mlp3.build, width=64)
    ds = data.dataset

    def make(t: Trial) -> Member:
        return Member.create(t, build, ds.input_shape, ds.num_classes, data.train_size)

    options = {"fusion": fusion, "jit_compile": xla, "chunk_steps": 100,
               "batch_bucket": bucket if xla else None}
    return PackCache(make, data, options, keep=8, model_runtime=runtime_hparams(mlp3.build))


def run(data, group, fusion, xla, bucket, epochs, reuse):
    c = cache(data, fusion, xla, bucket)
    if reuse:  # an earlier pack of other trials sets up the models and programs
        train_group(trials(100), c, epochs / 2, {})
    out = {}
    for r in train_group(group, c, epochs, {}):
        for m in r.members:
            out[m.trial_id] = (m.state, r.evaluation[m.trial_id], r.stats.fused, r.reused)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--bucket", type=int, default=70)
    args = p.parse_args()
    data = DeviceData(digits.load())
    group = trials(0)
    alone = {xla: {} for xla in (False, True)}
    for xla in (False, True):
        for t in group:
            alone[xla].update(run(data, [t], "off", xla, args.bucket, args.epochs, False))
    print("| pack | XLA | program | members bit-identical to alone | largest weight "
          "difference | largest accuracy difference |")
    print("|---|---|---|---|---|---|")
    for fusion in ("off", "on"):
        for xla in (False, True):
            for reuse in (False, True):
                packed = run(data, group, fusion, xla, args.bucket, args.epochs, reuse)
                same, worst_w, worst_a = 0, 0.0, 0.0
                for t in group:
                    s, e, fused, reused = packed[t.trial_id]
                    s0, e0, _, _ = alone[xla][t.trial_id]
                    assert fused == (fusion == "on") and reused == reuse
                    arrays = list(zip(s.weights + s.slots, s0.weights + s0.slots, strict=True))
                    same += all(np.array_equal(a, b) for a, b in arrays)
                    worst_w = max([worst_w] + [float(np.max(np.abs(a - b))) for a, b in
                                               zip(s.weights, s0.weights, strict=True)])
                    worst_a = max(worst_a, abs((e.val_accuracy or 0) - (e0.val_accuracy or 0)))
                print(f"| {'fused' if fusion == 'on' else 'plain'} | {'on' if xla else 'off'} "
                      f"| {'reused' if reuse else 'fresh'} | {same} of {len(group)} "
                      f"| {worst_w:.2g} | {worst_a:.4f} |")


if __name__ == "__main__":
    main()
