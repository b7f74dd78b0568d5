"""Whole-pack wall time of a long fused run: XLA off, ``jit_compile=auto``, and plain.

Usage: python scripts/bench_long_fused.py [--n 8] [--steps 3000] [--repeats 3]

Each repeat builds ``--n`` fresh mlp3 members (digits, batch 32, optimizers cycling as in
bench_pack.py) three times and trains each set for ``--steps`` steps in one ``Pack.train``
call: fused without XLA, fused under ``jit_compile=auto`` (XLA from ``XLA_MIN_STEPS``) and plain.
The time includes building and compiling the pack, which is what ``auto`` weighs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_pack import make_members

from packexp.data import digits
from packexp.models import mlp3
from packexp.packing import DeviceData, Pack
from packexp.telemetry import device_facts

SETTINGS = {"fused, XLA off": ("auto", False), "fused, jit_compile=auto": ("auto", "auto"),
            "plain, XLA off": ("off", False)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    data = DeviceData(digits.load())
    walls: dict[str, list[float]] = {name: [] for name in SETTINGS}
    xla = {}
    for _ in range(args.repeats):
        for name, (fusion, jit) in SETTINGS.items():
            members = make_members(data, mlp3.build, args.n, 32)
            t0 = time.perf_counter()
            stats = Pack(members, data, fusion=fusion, jit_compile=jit).train(
                {m.trial_id: args.steps for m in members})
            walls[name].append(time.perf_counter() - t0)
            xla[name] = stats.xla
    print(f"device: {device_facts()}")
    table = Table(title=f"{args.n} mlp3 members, {args.steps} steps in one call, "
                        f"median of {args.repeats}")
    for col in ("setting", "XLA used", "wall time s", "all runs s"):
        table.add_column(col, justify="left" if col == "setting" else "right")
    for name, times in walls.items():
        table.add_row(name, "yes" if xla[name] else "no", f"{statistics.median(times):.2f}",
                      " ".join(f"{t:.2f}" for t in times))
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
