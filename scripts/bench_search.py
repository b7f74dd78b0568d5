"""End-to-end benchmark: the whole packed Hyperband search under each strategy, interleaved.

Usage: python scripts/bench_search.py [--strategies none batch_size random knn] [--repeats 3]
                                      [overrides ...]

Each repeat runs every strategy once, in a rotated order, as a fresh `python -m packexp`
process with the same seed; the figures are medians of the searches' own wall times.
A strategy may carry overrides of its own after colons, to compare settings in one run:
``--strategies knn knn:pack.fusion=off none``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def search(variant: str, overrides: list[str], run_dir: Path) -> dict:
    """Runs one search; ``variant`` is a strategy name, optionally ``:override:...``."""
    strategy, *own = variant.split(":")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, "-m", "packexp", f"strategy={strategy}", "tracking=none",
           f"hydra.run.dir={run_dir}", *overrides, *own]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_search: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads((run_dir / "results.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategies", nargs="+", default=["none", "batch_size", "random", "knn"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("overrides", nargs="*", default=["scheduler.R=27", "seed=0"],
                   help="Hydra overrides for every run (default: scheduler.R=27 seed=0)")
    args = p.parse_args()

    walls: dict[str, list[float]] = {s: [] for s in args.strategies}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = args.strategies[r % len(args.strategies):] + args.strategies[
                : r % len(args.strategies)]
            for strategy in order:
                res = search(strategy, args.overrides, Path(tmp) / f"{len(walls[strategy])}-"
                             f"{strategy.replace(':', '_').replace('=', '-')}")
                walls[strategy].append(res["wall_time_s"])
                results[strategy] = res
                print(f"repeat {r + 1}: {strategy:>10} {res['wall_time_s']:8.2f} s",
                      file=sys.stderr)

    base = statistics.median(walls[args.strategies[0]])
    table = Table(title=f"Packed Hyperband, {' '.join(args.overrides)}: median of "
                        f"{args.repeats} interleaved runs")
    for col in ("strategy", "wall time s", "all runs s", f"speedup vs {args.strategies[0]}",
                "packs", "best trial", "best val_accuracy", "best hparams"):
        table.add_column(col, justify="left" if col in ("strategy", "best hparams") else "right")
    for strategy in args.strategies:
        res, median = results[strategy], statistics.median(walls[strategy])
        best = res["best"] or {}
        table.add_row(strategy, f"{median:.2f}", " ".join(f"{w:.1f}" for w in walls[strategy]),
                      f"{base / median:.2f}x", str(len(res["packs"])), best.get("trial_id", "-"),
                      f"{best.get('val_accuracy', float('nan')):.4f}",
                      json.dumps(best.get("hparams", {})))
    Console(width=200).print(table)
    same = {json.dumps(results[s]["best"], sort_keys=True) for s in args.strategies}
    print("same best configuration and score under every strategy:", len(same) == 1)


if __name__ == "__main__":
    main()
