"""End-to-end benchmark: whole packed Hyperband searches by strategy, before and after a change.

Usage: python scripts/bench_search.py [--strategies none batch_size random knn] [--repeats 3]
                                      [--baseline REV] [overrides ...]

Each repeat runs every strategy once, in a rotated order, as a fresh `python -m packexp`
process with the same seed. A strategy may carry overrides of its own after colons, to
compare settings in one run: ``--strategies knn knn:pack.fusion=off none``.

For each strategy it prints medians over the repeats: the search's own wall time
(``wall_time_s``), the whole process's (from launch to exit, with Python, TensorFlow and
Hydra starting), ``startup_s`` (command to first pack), the training share (sum of
``train_s`` over ``wall_time_s``) and each phase summed over the packs. Records written
before a phase existed count it 0.

``--baseline REV`` exports that commit's tree (``git archive``) and runs the same
strategies from it too, with its own ``packexp`` and ``conf/``, in the same Python
environment. Within a repeat each strategy runs baseline and current back to back, the
order alternating between repeats (ABBA), so both see the same machine load; a before/after
table gives the ratios. The exported tree and every run directory are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the device facts import TensorFlow here

from rich.console import Console
from rich.table import Table

from packexp.records.plots import PHASE_COLORS, phase_totals, train_share
from packexp.records.search_result import SearchResult

ROOT = Path(__file__).resolve().parents[1]
CURRENT, BASELINE = "current", "baseline"
PHASES = tuple(PHASE_COLORS)


def search(variant: str, overrides: Sequence[str], run_dir: Path,
           tree: Path = ROOT) -> tuple[dict, float]:
    """Runs one search from ``tree``; ``variant`` is a strategy name, optionally ``:override:...``.

    Returns:
        Its ``results.json`` and the whole process's wall time in seconds.
    """
    strategy, *own = variant.split(":")
    # The tree's own packexp wins over the editable install (PYTHONPATH comes first).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "packexp", f"strategy={strategy}", "tracking=none",
           f"hydra.run.dir={run_dir}", *overrides, *own]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"bench_search: {' '.join(cmd)} (in {tree}) failed:\n{out.stderr[-2000:]}")
    return json.loads((run_dir / "results.json").read_text()), process_s


def schedule(strategies: Sequence[str], repeats: int,
             trees: Sequence[str] = (CURRENT,)) -> list[list[tuple[str, str]]]:
    """Each repeat's runs as ``(tree, strategy)``: strategies rotated by one per repeat,
    each run from every tree back to back, the trees' order reversed every other repeat."""
    plan = []
    for r in range(repeats):
        k = r % len(strategies)
        order = [*strategies[k:], *strategies[:k]]
        own = list(trees) if r % 2 == 0 else list(reversed(trees))
        plan.append([(tree, s) for s in order for tree in own])
    return plan


def summarize(runs: Sequence[tuple[Mapping[str, Any], float]]) -> dict[str, Any]:
    """Medians over one variant's runs, each ``(results, process seconds)``."""
    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    results = [r for r, _ in runs]
    typed = [SearchResult.from_json(ROOT, r) for r in results]  # run directories deleted by now
    last = results[-1]
    return {
        "wall_time_s": median([r["wall_time_s"] for r in results]),
        "process_s": median([s for _, s in runs]),
        "startup_s": median([r.get("startup_s") for r in results]),
        "train_share": median([train_share(r) for r in typed]),
        **{phase: median([phase_totals(r)[phase] for r in typed]) for phase in PHASES},
        "walls": [r["wall_time_s"] for r in results],
        "packs": len(last["packs"]),
        "programs": last.get("programs"),
        "looped": sum(bool(p.get("looped")) for p in last["packs"]),
        "old_records": any("trace_s" not in p for r in results for p in r["packs"]),
        "best": last.get("best") or {},
    }


def seconds(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(before: float | None, after: float | None) -> str:
    return f"{before / after:.2f}x" if before and after else "-"


def variants_table(title: str, stats: Mapping[tuple[str, str], Mapping[str, Any]],
                   strategies: Sequence[str], trees: Sequence[str]) -> Table:
    table = Table(title=title)
    first = strategies[0]
    columns = ["strategy", "tree", "search s", "process s", "startup s", "runs s",
               f"speedup vs {first}", "train share", *(p.removesuffix("_s") + " s"
                                                       for p in PHASES),
               "packs", "looped", "programs", "best trial", "best val_accuracy"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("strategy", "tree") else "right")
    for strategy in strategies:
        for tree in trees:
            s = stats[tree, strategy]
            share = s["train_share"]
            table.add_row(
                strategy, tree, seconds(s["wall_time_s"]), seconds(s["process_s"]),
                seconds(s["startup_s"]), " ".join(f"{w:.1f}" for w in s["walls"]),
                ratio(stats[tree, first]["wall_time_s"], s["wall_time_s"]),
                "-" if share is None else f"{share:.0%}",
                *(seconds(s[p]) for p in PHASES), str(s["packs"]), str(s["looped"]),
                str(s["programs"]), s["best"].get("trial_id", "-"),
                seconds(s["best"].get("val_accuracy"), 4))
    return table


def before_after_table(title: str, stats: Mapping[tuple[str, str], Mapping[str, Any]],
                       strategies: Sequence[str]) -> Table:
    table = Table(title=title)
    for col in ("strategy", "search s before", "search s now", "search before/now",
                "process s before", "process s now", "process before/now", "same best"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for strategy in strategies:
        old, new = stats[BASELINE, strategy], stats[CURRENT, strategy]
        table.add_row(strategy, seconds(old["wall_time_s"]), seconds(new["wall_time_s"]),
                      ratio(old["wall_time_s"], new["wall_time_s"]),
                      seconds(old["process_s"]), seconds(new["process_s"]),
                      ratio(old["process_s"], new["process_s"]),
                      "yes" if _same(old["best"], new["best"]) else "NO")
    return table


def export_tree(rev: str, into: Path) -> Path:
    """``rev``'s committed tree, written to ``into`` (the repository is left untouched)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def describe(rev: str) -> str:
    """``rev`` as a short hash and subject, ``+ uncommitted changes`` for the work tree."""
    line = _git("log", "-1", "--format=%h %s", rev)[:90]
    if rev == "HEAD" and _git("status", "--porcelain", "--untracked-files=no"):
        line += " + uncommitted changes"
    return line


def main() -> None:
    summary, _usage, rest = __doc__.split("\n\n", 2)
    p = argparse.ArgumentParser(description=f"{summary}\n\n{rest}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategies", nargs="+", metavar="S",
                   default=["none", "batch_size", "random", "knn"],
                   help="strategies to run, each optionally strategy:override:... "
                        "(default: none batch_size random knn)")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="runs of each variant (default 3)")
    p.add_argument("--baseline", metavar="REV",
                   help="also run every strategy from this commit's tree, interleaved")
    p.add_argument("overrides", nargs="*", default=["scheduler.R=27", "seed=0"],
                   help="Hydra overrides for every run (default: scheduler.R=27 seed=0); "
                        "not straight after --strategies, which would take them (or put "
                        "-- before them)")
    args = p.parse_args()
    for strategy in args.strategies:
        if "=" in strategy.split(":")[0]:
            p.error(f"{strategy!r} looks like an override, not a strategy: put overrides "
                    "before --strategies or after --")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.baseline:
        try:
            _git("rev-parse", "--verify", "--quiet", f"{args.baseline}^{{commit}}")
        except subprocess.CalledProcessError:
            p.error(f"--baseline {args.baseline}: not a commit of {ROOT}")

    from packexp.telemetry import device_facts  # imports TensorFlow

    console = Console(width=220)
    console.print(f"device: {device_facts()}")
    console.print(f"{CURRENT}: {describe('HEAD')} ({ROOT})")
    trees = [CURRENT]
    if args.baseline:
        console.print(f"{BASELINE}: {describe(args.baseline)}")
        trees = [BASELINE, CURRENT]
    runs: dict[tuple[str, str], list[tuple[dict, float]]] = {
        (tree, s): [] for tree in trees for s in args.strategies}
    with tempfile.TemporaryDirectory(prefix="bench_search-") as tmp:
        where = {CURRENT: ROOT}
        if args.baseline:
            where[BASELINE] = export_tree(args.baseline, Path(tmp) / "baseline-tree")
        for r, plan in enumerate(schedule(args.strategies, args.repeats, trees)):
            for tree, strategy in plan:
                name = f"{tree}-{re.sub(r'[^A-Za-z0-9_.-]', '_', strategy)}-{r}"
                res, process_s = search(strategy, args.overrides, Path(tmp) / name,
                                        where[tree])
                runs[tree, strategy].append((res, process_s))
                print(f"repeat {r + 1}: {tree:>8} {strategy:>10} search "
                      f"{res['wall_time_s']:8.2f} s, process {process_s:8.2f} s",
                      file=sys.stderr)

    stats = {key: summarize(value) for key, value in runs.items()}
    console.print(variants_table(
        f"Packed Hyperband, {' '.join(args.overrides)}: medians of {args.repeats} "
        "interleaved runs (phases: seconds summed over the packs)",
        stats, args.strategies, trees))
    for tree in trees:
        if any(stats[tree, s]["old_records"] for s in args.strategies):
            console.print(f"{tree}: packs without trace_s, recorded before the phase timings: "
                          "their build_s is the step functions' compile time, the phases "
                          "they lack count 0")
        bests = {s: stats[tree, s]["best"] for s in args.strategies}
        if len({json.dumps(b, sort_keys=True) for b in bests.values()}) == 1:
            console.print(f"{tree}: the same best under every strategy: "
                          f"{_best(bests[args.strategies[0]])}")
        else:
            console.print(f"{tree}: the best DIFFERS by strategy:")
            for s, best in bests.items():
                console.print(f"  {s}: {_best(best)}")
    if args.baseline:
        console.print(before_after_table(
            f"Before ({args.baseline}) and now: medians of {args.repeats} runs each; "
            "before/now > 1 means faster now", stats, args.strategies))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _best(best: Mapping[str, Any]) -> str:
    if not best:
        return "none"
    return (f"{best['trial_id']} val_accuracy {best['val_accuracy']:.4f} after "
            f"{best.get('epochs', '?')} epochs, {json.dumps(best.get('hparams', {}))}")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


if __name__ == "__main__":
    main()
