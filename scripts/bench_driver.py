"""The driver at scale: ASHA on the fake trainer (no training: every second is the driver's) for
growing numbers of configurations, before and after a change (issue 74's table).

Usage: python scripts/bench_driver.py [--sizes 1000 2000 4000 10000] [--baseline REV]
                                      [--timeout 900] [--executor local] [--tracking none]
                                      [overrides ...]

Each size runs once per tree as a fresh process (the current tree, and with ``--baseline`` that
commit's, exported with ``git archive`` and run in the same Python environment, back to back):
``packexp.tune("mlp3", "digits", trainer=FakeTrainer(), scheduler="asha", strategy="knn",
tracking="none", overrides=["scheduler.num_configs=N", "scheduler.max_epochs=4N",
"scheduler.R=27", ...])`` in a fresh ``PACKEXP_HOME``. It prints, per size and tree, the
search's time (``wall_time_s``: from the first pack), the driver's time per trial, the whole
call, the process's peak resident set and the journal's size; a run past ``--timeout`` seconds
is stopped and shown as such. ``--executor simulated`` runs the same search on simulated
workers (``executor.num_workers`` as an override): its times are then the simulated clock's,
and the real seconds are ``real_wall_time_s``. ``--tracking mlflow`` logs the search to a
sqlite store in that ``PACKEXP_HOME`` (the whole call then includes the writer's drain).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]

# One search, run as ``python -c`` in the tree under test: the result's figures as one JSON line.
CHILD = """
import json, os, resource, sys, time
called = time.perf_counter()
import packexp
from packexp.testing.fake_trainer import FakeTrainer
n, executor, tracking, run_dir, *extra = sys.argv[1:]
result = packexp.tune("mlp3", "digits", trainer=FakeTrainer(), scheduler="asha",
                      strategy="knn", tracking=tracking, executor=executor, run_dir=run_dir,
                      overrides=[f"scheduler.num_configs={n}", f"scheduler.max_epochs={4 * int(n)}",
                                 "scheduler.R=27", *extra])
results = json.loads((result.run_dir / "results.json").read_text())
runs = None
if tracking == "mlflow":  # the trial runs the store holds, ended
    import pathlib, sqlite3
    store, = pathlib.Path(os.environ["PACKEXP_HOME"]).rglob("mlflow.db")
    with sqlite3.connect(store) as db:
        runs = db.execute("SELECT count(*) FROM runs WHERE status != 'RUNNING' AND run_uuid "
                          "IN (SELECT run_uuid FROM tags WHERE key = 'mlflow.parentRunId')"
                          ).fetchone()[0]
print(json.dumps({"mlflow_trial_runs": runs,
                  "whole_s": time.perf_counter() - called, "searched_s": result.wall_time_s,
                  "real_searched_s": results.get("real_wall_time_s"),
                  "trials": len(results["trials"]), "packs": len(results["packs"]),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "journal_mb": (result.run_dir / "journal.jsonl").stat().st_size / 2**20}))
"""


def run(tree: Path, n: int, executor: str, tracking: str, extra: list[str],
        timeout: float) -> dict[str, Any]:
    """One search of ``n`` configurations from ``tree``: its figures, or ``{"timeout": s}``."""
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as home:
        env = {**os.environ, "PACKEXP_HOME": home, "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [
                   os.environ.get("PYTHONPATH")])])}
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, str(n), executor, tracking,
                                   str(Path(home) / "run"), *extra], cwd=home, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"timeout": timeout}
        if done.returncode:
            raise SystemExit(f"{tree}: n={n} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def row(tree: str, n: int, figures: dict[str, Any]) -> list[str]:
    if "timeout" in figures:
        return [str(n), tree, f"> {figures['timeout']:.0f}", "", "", "", "", "", ""]
    per_trial = 1000 * figures["searched_s"] / n
    real = figures.get("real_searched_s")
    return [str(n), tree, f"{figures['searched_s']:.1f}",
            "" if real is None else f"{real:.1f}", f"{per_trial:.2f}",
            f"{figures['whole_s']:.1f}", f"{figures['peak_rss_mb']:.0f}",
            f"{figures['journal_mb']:.1f}",
            "" if figures.get("mlflow_trial_runs") is None else str(figures["mlflow_trial_runs"])]


def main() -> None:
    summary, _usage, rest = __doc__.split("\n\n", 2)
    p = argparse.ArgumentParser(description=f"{summary}\n\n{rest}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 10000])
    p.add_argument("--baseline", help="a commit to run the same sizes from, for before/after")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    p.add_argument("--executor", default="local")
    p.add_argument("--tracking", default="none", help="none, or mlflow (a sqlite store in the "
                   "run's fresh PACKEXP_HOME)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    from bench_search import describe, export_tree  # scripts/ is on the path beside it

    trees = {"current": ROOT}
    with tempfile.TemporaryDirectory(prefix="bench-driver-tree-") as scratch:
        if args.baseline:
            trees = {"baseline": export_tree(args.baseline, Path(scratch) / "baseline"),
                     **trees}
        console = Console(width=150)
        table = Table(title=f"ASHA on the fake trainer, strategy=knn, executor={args.executor}, "
                      f"tracking={args.tracking}"
                      f"{' ' + ' '.join(args.overrides) if args.overrides else ''}")
        for column in ("N", "tree", "searched (s)", "real (s)", "driver per trial (ms)",
                       "whole call (s)", "peak RSS (MB)", "journal (MB)", "MLflow trial runs"):
            table.add_column(column, justify="left" if column == "tree" else "right")
        for n in args.sizes:
            for name, tree in trees.items():
                figures = run(tree, n, args.executor, args.tracking, args.overrides,
                              args.timeout)
                console.print(f"n={n} {name}: {json.dumps(figures)}", highlight=False)
                table.add_row(*row(name, n, figures))
        console.print(table)
        console.print(f"current: {describe('HEAD')}"
                      + (f"\nbaseline: {describe(args.baseline)}" if args.baseline else ""))
        console.print("command: python scripts/bench_driver.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
