"""Set-up time of a plain pack of CNN members: build, first training call (its trace), first
evaluation, and a second call, for comparing two trees in one run.

Usage: python scripts/bench_trace.py [--members 3] [--optimizer OPT]
                                     [--mode looped|unrolled|fused] [--steps 0]

The pack is MobileNetV2 (alpha 0.35, BatchNorm momentum 0.7, as ``conf/model/mobilenet.yaml``)
on digits' 8x8 images, members of batch 20, 30, 65, ... with the activations knn put together
in a default search (sigmoid, leaky_relu, relu, tanh), each trained one step. It uses only
``Member.create`` and ``Pack``, so the same file times an earlier tree too:
``PYTHONPATH=/path/to/old/tree python scripts/bench_trace.py``. ``--optimizer`` gives every
member that optimizer (default momentum).

``--mode`` picks the pack: ``looped`` (``pack.loop=auto``, the default where the tree has it),
``unrolled`` (``pack.loop=off``: every member's graph side by side; an earlier tree's only
plain pack) or ``fused`` (``pack.fusion=on``: HFTA's grouped convolutions and batched
BatchNorm). With ``--steps N`` it then trains every member N more steps and reports the
milliseconds per member-step (``member_step_ms``).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCHES = (20, 30, 65, 45, 55, 25, 70, 35)
ACTIVATIONS = ("sigmoid", "leaky_relu", "relu", "tanh")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--optimizer", default="momentum")
    p.add_argument("--mode", choices=["looped", "unrolled", "fused"], default="looped")
    p.add_argument("--steps", type=int, default=0)
    args = p.parse_args()

    from packexp.data import digits
    from packexp.models import mobilenet
    from packexp.packing import DeviceData, Member, Pack
    from packexp.space import Trial, derive_seed
    from packexp.space.options import PackSettings

    data = DeviceData(digits.load(images=True))
    build = functools.partial(mobilenet.build, bn_momentum=0.7)
    t0 = time.perf_counter()
    members = [Member.create(Trial(f"m{i}", {"batch_size": BATCHES[i % len(BATCHES)],
                                             "optimizer": args.optimizer,
                                             "learning_rate": 1e-3,
                                             "activation": ACTIVATIONS[i % len(ACTIVATIONS)]},
                                   (), seed=derive_seed(1, i)),
                             build, (8, 8, 1), 10, data.train_size)
               for i in range(args.members)]
    t1 = time.perf_counter()
    # An earlier tree has no pack.loop: its plain pack is the unrolled one.
    settings = {"looped": {"fusion": "off", "loop": "auto"},
                "unrolled": {"fusion": "off", "loop": "off"},
                "fused": {"fusion": "on"}}[args.mode]
    if "loop" not in inspect.signature(Pack).parameters:
        settings.pop("loop", None)
    pack = Pack(members, data, PackSettings(jit_compile=False, **settings))
    steps = {m.trial_id: 1 for m in members}
    pack.train(steps)
    t2 = time.perf_counter()
    pack.evaluate()
    t3 = time.perf_counter()
    pack.train(steps)
    t4 = time.perf_counter()
    out = {"members": args.members, "mode": args.mode, "build_s": round(t1 - t0, 2),
           "first_train_s": round(t2 - t1, 2), "first_eval_s": round(t3 - t2, 2),
           "second_train_s": round(t4 - t3, 2)}
    if args.steps:
        pack.train({m.trial_id: args.steps for m in members})
        out["member_step_ms"] = round(
            (time.perf_counter() - t4) * 1000 / (args.steps * args.members), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
