"""Rank preservation of narrow stand-ins (issue 76): the same configurations trained at full
width and as stand-ins S times narrower (``surrogate.scale``), each alone in a plain pack on
mnist1d, and the Spearman correlation of their validation accuracies; with the time each
width took. A measurement, not a test.

    .venv/bin/python scripts/bench_stand_ins.py --configs 20 --width 512 --epochs 9 --scales 2 4 8
    .venv/bin/python scripts/bench_stand_ins.py --model cnn --width 64 --epochs 9 --scales 2 4 8

``--model cnn`` trains the CNN (``--depth``: its blocks) on digits as 8x8 images.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp3", "cnn"], default="mlp3")
    parser.add_argument("--configs", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=None, help="mlp3: 3, cnn: 2 blocks")
    parser.add_argument("--epochs", type=float, default=9)
    parser.add_argument("--scales", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from packexp.data import digits, mnist1d
    from packexp.models import cnn, mlp3
    from packexp.models.narrowed import Narrowed
    from packexp.packing import DeviceData, Member, Pack
    from packexp.space import SearchSpace, derive_seed
    from packexp.space.options import PackSettings
    from packexp.surrogate import SCALE_KEY

    space = SearchSpace({"batch_size": [20, 30, 40, 50, 60, 70],
                         "optimizer": ["adam", "sgd", "adagrad", "momentum"],
                         "learning_rate": [1e-4, 1e-3, 1e-2, 1e-1],
                         "activation": ["sigmoid", "leaky_relu", "tanh", "relu"]},
                        categorical=["optimizer", "activation"])
    trials = space.sample(args.configs, args.seed, 0)
    if args.model == "mlp3":
        depth = 3 if args.depth is None else args.depth
        data = DeviceData(mnist1d.load(seed=args.seed))
        build = functools.partial(mlp3.build, width=args.width, depth=depth)
        shown = f"mnist1d, mlp3 width {args.width} depth {depth}"
    else:
        depth = 2 if args.depth is None else args.depth
        data = DeviceData(digits.load(images=True, seed=args.seed))
        build = functools.partial(cnn.build, width=args.width, blocks=depth)
        shown = f"digits (8x8 images), cnn width {args.width} blocks {depth}"
    ds = data.dataset
    settings = PackSettings(fusion="off", jit_compile=False)
    scores: dict[int, list[float]] = {}
    seconds: dict[int, float] = {}
    for scale in [1, *args.scales]:
        narrowed = Narrowed(build, scale)
        t0 = time.perf_counter()
        scores[scale] = []
        for i, t in enumerate(trials):
            trial = type(t)(t.trial_id, {**t.hparams, SCALE_KEY: scale}, t.features,
                            seed=derive_seed(args.seed, 7, i))
            member = Member.create(trial, narrowed, ds.input_shape, ds.num_classes,
                                   data.train_size)
            pack = Pack([member], data, settings)
            pack.train({member.trial_id: member.steps_for(args.epochs)})
            scores[scale].append(pack.evaluate()[member.trial_id].val_accuracy or 0.0)
        seconds[scale] = time.perf_counter() - t0
    full = pd.Series(scores[1])
    print(f"{shown}, {args.configs} configurations, "
          f"{args.epochs:g} epochs each, plain packs of one")
    print(f"full width: {seconds[1]:.1f} s, best {full.max():.4f}")
    for scale in args.scales:
        narrow = pd.Series(scores[scale])
        rho = narrow.corr(full, method="spearman")
        top = int(np.argmax(scores[scale]))
        print(f"scale {scale}: {seconds[scale]:.1f} s ({seconds[1] / seconds[scale]:.2f}x), "
              f"Spearman {rho:.3f}; its best configuration scores {scores[1][top]:.4f} at "
              f"full width (the full best {full.max():.4f})")


if __name__ == "__main__":
    main()
