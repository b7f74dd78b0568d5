"""Learning-rate schedules in one search space: the best accuracy each search finds, and its
wall time, by schedule and schedule horizon, over several seeds.

Usage: python scripts/compare_schedules.py [--schedules constant cosine rex]
                                           [--horizons trial rung] [--seeds 1 2 3]
                                           [--repeats 1] [overrides ...]

Every arm is the same Packed Hyperband search (``scheduler.R=27`` on digits, the default
search space and strategy unless overridden) with ``lr_schedule`` fixed to one schedule and
``scheduler.lr_horizon`` to one horizon; ``constant`` has no horizon and runs once. Each
search is a fresh ``python -m packexp`` process; within a seed and repeat the arms run back
to back, their order rotated from one repeat and seed to the next, so they share the
machine's load. Prints a Markdown table: for each seed, the best validation accuracy of each
arm (the trial that found it), then each arm's median search and process seconds over all
its runs, and the mean best accuracy over the seeds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import search

from packexp.space.options import LR_HORIZONS, LR_SCHEDULES


def arms(schedules: list[str], horizons: list[str]) -> list[tuple[str, str | None]]:
    """``(schedule, horizon)`` pairs: ``constant`` once, with no horizon."""
    return [(s, None) if s == "constant" else (s, h)
            for s in schedules for h in (horizons if s != "constant" else [None])]


def name(arm: tuple[str, str | None]) -> str:
    schedule, horizon = arm
    return schedule if horizon is None else f"{schedule} ({horizon})"


def main() -> None:
    summary, _usage, rest = __doc__.split("\n\n", 2)
    p = argparse.ArgumentParser(description=f"{summary}\n\n{rest}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedules", nargs="+", default=["constant", "cosine", "rex"],
                   choices=LR_SCHEDULES)
    p.add_argument("--horizons", nargs="+", default=list(LR_HORIZONS), choices=LR_HORIZONS)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--repeats", type=int, default=1, help="runs of each arm per seed")
    p.add_argument("--strategy", default="cost")
    p.add_argument("overrides", nargs="*", default=["scheduler.R=27"],
                   help="Hydra overrides for every run (default: scheduler.R=27)")
    args = p.parse_args()
    plan = arms(args.schedules, args.horizons)
    best: dict[tuple[int, tuple], tuple[float, str]] = {}
    times: dict[tuple, list[tuple[float, float]]] = {arm: [] for arm in plan}
    turn = 0
    with tempfile.TemporaryDirectory(prefix="compare_schedules-") as tmp:
        for seed in args.seeds:
            for r in range(args.repeats):
                order = plan[turn % len(plan):] + plan[:turn % len(plan)]
                turn += 1
                for arm in order:
                    schedule, horizon = arm
                    own = [f"+search_space.params.lr_schedule=[{schedule}]", f"seed={seed}"]
                    if horizon:
                        own.append(f"scheduler.lr_horizon={horizon}")
                    run_dir = Path(tmp) / f"{schedule}-{horizon}-{seed}-{r}"
                    res, process_s = search(args.strategy, [*args.overrides, *own], run_dir)
                    top = res["best"] or {}
                    best[seed, arm] = (top.get("val_accuracy", float("nan")),
                                       top.get("trial_id", "-"))
                    times[arm].append((res["wall_time_s"], process_s))
                    print(f"seed {seed} repeat {r + 1}: {name(arm):>16} best "
                          f"{best[seed, arm][0]:.4f} search {res['wall_time_s']:.2f} s, "
                          f"process {process_s:.2f} s", file=sys.stderr)

    heads = [name(a) for a in plan]
    print(f"strategy={args.strategy} {' '.join(args.overrides)}; best val_accuracy "
          "(trial) per seed\n")
    print("| seed | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(plan))
    for seed in args.seeds:
        cells = [f"{best[seed, a][0]:.4f} ({best[seed, a][1]})" for a in plan]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    means = [statistics.mean(best[s, a][0] for s in args.seeds) for a in plan]
    print("| mean best | " + " | ".join(f"{m:.4f}" for m in means) + " |")
    for label, i in (("median search s", 0), ("median process s", 1)):
        cells = [f"{statistics.median(t[i] for t in times[a]):.2f}" for a in plan]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
