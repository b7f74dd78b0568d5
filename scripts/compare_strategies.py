"""Table 4 of a sweep: python scripts/compare_strategies.py --runs DIR... | --mlflow URI.

Beside wall times and speedups it reports whether the strategies decided alike: for each
strategy, against ``none``'s run of the same search (seed, R, eta), whether every rung
promoted the same trials, whether the best is the same trial, and the largest drift of one
trial's score at one rung. Plain packs give drift 0 (bit-exact); fused packs agree to
float32 rounding, which chaotic configurations amplify.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

# MLflow draws a progress bar per downloaded file where tqdm is installed (Optuna brings it).
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

PAPER_ORDER = ("none", "batch_size", "random", "knn")
BASELINE = "none"
TIMES = "\N{MULTIPLICATION SIGN}"
ABSENT = "-"
RESULT_KEYS = ("strategy", "model", "dataset", "wall_time_s")


class UsageError(Exception):
    """Bad input; reported as one line with exit code 2."""


@dataclass(frozen=True)
class Search:
    """What one run decided, from its results.json.

    Attributes:
        key: ``(seed, R, eta)``; runs with equal keys sampled the same trials.
        scores: ``(trial_id, rung)`` -> validation accuracy, for every rung a trial reached;
            the keys are the run's promotions.
        best: ``(trial_id, epochs)`` of the best, or None.
    """

    key: tuple
    scores: dict[tuple[str, int], float | None]
    best: tuple[str, float] | None


@dataclass(frozen=True)
class RunResult:
    strategy: str
    model: str
    dataset: str
    wall_time_s: float
    best_val_accuracy: float | None
    search: Search | None = None


@dataclass(frozen=True)
class Agreement:
    """One strategy's runs against the reference strategy's runs of the same searches."""

    reference: str
    pairs: int
    same_promotions: bool
    same_best: bool
    drift: float | None  # the largest |score difference| of one trial at one rung


@dataclass(frozen=True)
class Cell:
    """All runs of one (row, strategy) pair."""

    wall_time_s: float  # the median
    best_val_accuracy: float | None  # the best over the runs
    runs: int


Row = tuple[str, str]  # (model, dataset)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Compare packing strategies: wall time, speedup over none and best "
                    "validation accuracy per model, as in the paper's Table 4.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", type=Path, metavar="DIR",
                        help="run or multirun sweep directories; every results.json below them")
    source.add_argument("--mlflow", metavar="URI",
                        help="MLflow tracking URI, e.g. sqlite:///outputs/mlflow.db")
    parser.add_argument("--experiment", default="packexp",
                        help="MLflow experiment name (with --mlflow; default: packexp)")
    parser.add_argument("--dataset", help="only runs on this dataset")
    parser.add_argument("--out", type=Path, default=Path("strategy_comparison.png"),
                        help="bar chart PNG (default: strategy_comparison.png)")
    parser.add_argument("--log-y", action="store_true",
                        help="log-scale wall time axis, for models of very different cost")
    return parser.parse_args(argv)


def _accuracy(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def load_results_dirs(dirs: list[Path]) -> tuple[list[RunResult], str]:
    """Every ``results.json`` below ``dirs``, once each; returns them and a description."""
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise UsageError(f"--runs: no such directory: {', '.join(missing)}")
    files = sorted({p.resolve() for d in dirs for p in d.rglob("results.json")})
    seen: set[str] = set()
    results = []
    for path in files:
        try:
            text = path.read_text()
        except OSError as e:
            print(f"compare_strategies: warning: skipping {path}: {e}", file=sys.stderr)
            continue
        # A run's results.json may also be copied among MLflow's artifacts in the same folder.
        digest = hashlib.sha256(text.encode()).hexdigest()
        run = None if digest in seen else _parse_results(path, text)
        seen.add(digest)
        if run is not None:
            results.append(run)
    return results, f"results.json under {', '.join(str(d) for d in dirs)}"


def _parse_results(path: Path, text: str) -> RunResult | None:
    try:
        data = json.loads(text)
    except ValueError as e:
        print(f"compare_strategies: warning: skipping {path}: {e}", file=sys.stderr)
        return None
    if not isinstance(data, dict) or any(k not in data for k in RESULT_KEYS):
        print(f"compare_strategies: warning: skipping {path}: not a packexp results.json",
              file=sys.stderr)
        return None
    best = data.get("best") or {}
    return RunResult(str(data["strategy"]), str(data["model"]), str(data["dataset"]),
                     float(data["wall_time_s"]), _accuracy(best.get("val_accuracy")),
                     search_of(data))


def search_of(data: dict) -> Search | None:
    """The decisions recorded in a results.json; None for one without trials."""
    trials = data.get("trials")
    if not trials:
        return None
    try:
        scores = {(str(t["trial_id"]), int(r["rung"])): _accuracy(r["val_accuracy"])
                  for t in trials for r in t["rungs"]}
    except (KeyError, TypeError, ValueError):
        return None
    best = data.get("best")
    return Search((data.get("seed"), data.get("R"), data.get("eta")), scores,
                  (str(best["trial_id"]), float(best["epochs"])) if best else None)


def load_mlflow(uri: str, experiment: str) -> tuple[list[RunResult], str]:
    """Finished parent ``tune`` runs of ``experiment``; returns them and a description."""
    if uri.startswith("sqlite:///"):
        # MLflow would silently create an empty store at a mistyped path.
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise UsageError(f"--mlflow {uri}: no such MLflow store: {path}")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
    except Exception as e:
        raise UsageError(f"--mlflow {uri}: cannot read the MLflow store "
                         f"({type(e).__name__}: {e})") from None
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise UsageError(f"--experiment {experiment}: no such MLflow experiment in {uri} "
                         f"(found: {', '.join(names) or 'none'})")
    results = [
        RunResult(run.data.tags["strategy"], run.data.tags["model"], run.data.tags["dataset"],
                  float(run.data.metrics["wall_time_s"]),
                  _accuracy(run.data.metrics.get("best_val_accuracy")),
                  _logged_search(client, run.info.run_id))
        for run in _search_all(client, found.experiment_id,
                               "attributes.status = 'FINISHED' AND tags.task = 'tune'")
        if "mlflow.parentRunId" not in run.data.tags
        and all(k in run.data.tags for k in RESULT_KEYS[:3])
        and "wall_time_s" in run.data.metrics
    ]
    return results, f"MLflow experiment {experiment!r} in {uri}"


def _logged_search(client: MlflowClient, run_id: str) -> Search | None:
    """The decisions in the run's results.json artifact; None where it has none."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, "results.json", tmp)
            return search_of(json.loads(Path(path).read_text()))
        except Exception:  # an older run, or an artifact store out of reach
            return None


def _search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> Iterator[Run]:
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def aggregate(results: list[RunResult]) -> dict[Row, dict[str, Cell]]:
    """Median wall time and best accuracy per (model, dataset) row and strategy."""
    groups: dict[Row, dict[str, list[RunResult]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        groups[(r.model, r.dataset)][r.strategy].append(r)
    table: dict[Row, dict[str, Cell]] = {}
    for row in sorted(groups):
        table[row] = {}
        for strategy, runs in groups[row].items():
            accuracies = [r.best_val_accuracy for r in runs if r.best_val_accuracy is not None]
            table[row][strategy] = Cell(statistics.median(r.wall_time_s for r in runs),
                                        max(accuracies, default=None), len(runs))
    return table


def strategy_order(table: dict[Row, dict[str, Cell]]) -> list[str]:
    """The paper's column order, then any other strategies by name."""
    present = {s for cells in table.values() for s in cells}
    return [s for s in PAPER_ORDER if s in present] + sorted(present - set(PAPER_ORDER))


def speedup(cells: dict[str, Cell], strategy: str) -> float | None:
    """``none``'s wall time over ``strategy``'s, or None without both."""
    if BASELINE not in cells or strategy not in cells or cells[strategy].wall_time_s <= 0:
        return None
    return cells[BASELINE].wall_time_s / cells[strategy].wall_time_s


def best_speedup(cells: dict[str, Cell]) -> tuple[float, str] | None:
    figures = [(s, name) for name in cells if name != BASELINE
               if (s := speedup(cells, name)) is not None]
    return max(figures) if figures else None


def agreements(results: list[RunResult], strategies: list[str]) -> dict[Row, dict[str, Agreement]]:
    """Each strategy's decisions against the baseline's (``none``, else the first present).

    A strategy's run is paired with every baseline run of the same row and search key; rows
    and strategies with no such pair are left out.
    """
    by_row: dict[Row, dict[str, list[Search]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.search is not None:
            by_row[(r.model, r.dataset)][r.strategy].append(r.search)
    out: dict[Row, dict[str, Agreement]] = {}
    for row in sorted(by_row):
        searches = by_row[row]
        reference = next((s for s in strategies if s in searches), None)
        for strategy in strategies:
            if strategy == reference or strategy not in searches:
                continue
            pairs = [(a, b) for a in searches[strategy] for b in searches[reference]
                     if a.key == b.key]
            if not pairs:
                continue
            drifts = [abs(a.scores[k] - b.scores[k]) for a, b in pairs for k in a.scores
                      if a.scores[k] is not None and b.scores.get(k) is not None]
            out.setdefault(row, {})[strategy] = Agreement(
                reference=reference,
                pairs=len(pairs),
                same_promotions=all(a.scores.keys() == b.scores.keys() for a, b in pairs),
                same_best=all(a.best == b.best for a, b in pairs),
                drift=max(drifts, default=None))
    return out


def agreement_table(found: dict[Row, dict[str, Agreement]], one_dataset: bool,
                    where: str) -> Table:
    table = Table(title=f"Same decisions? (runs of the same seed, R and eta){where}")
    for column in ("model", "strategy", "against"):
        table.add_column(column)
    for column in ("runs paired", "same promotions", "same best", "largest score drift"):
        table.add_column(column, justify="right")
    for row, cells in found.items():
        for strategy, a in cells.items():
            table.add_row(row_label(row, one_dataset), strategy, a.reference, str(a.pairs),
                          "yes" if a.same_promotions else "NO", "yes" if a.same_best else "NO",
                          ABSENT if a.drift is None else f"{a.drift:.4f}")
    return table


def row_label(row: Row, one_dataset: bool) -> str:
    return row[0] if one_dataset else f"{row[0]} ({row[1]})"


def build_tables(table: dict[Row, dict[str, Cell]], strategies: list[str]) -> list[Table]:
    datasets = {d for _, d in table}
    one = len(datasets) == 1
    where = f" on {next(iter(datasets))}" if one else ""
    times = Table(title=f"Hyperband wall time (s){where}")
    speedups = Table(title=f"Speedup over {BASELINE}{where}")
    accuracy = Table(title=f"Best validation accuracy{where}")
    for t in (times, speedups, accuracy):
        t.add_column("model")
        for s in strategies:
            t.add_column(s, justify="right")
    times.add_column("speedup", justify="right")
    for row, cells in table.items():
        label = row_label(row, one)
        times.add_row(label, *(_time_cell(cells.get(s)) for s in strategies),
                      _best_cell(best_speedup(cells)))
        speedups.add_row(label, *(_speedup_cell(speedup(cells, s)) for s in strategies))
        accuracy.add_row(label, *(_accuracy_cell(cells.get(s)) for s in strategies))
    return [times, speedups, accuracy]


def _time_cell(cell: Cell | None) -> str:
    if cell is None:
        return ABSENT
    return f"{cell.wall_time_s:.1f}" + ("*" if cell.runs > 1 else "")


def _best_cell(best: tuple[float, str] | None) -> str:
    return ABSENT if best is None else f"up to {best[0]:.1f}{TIMES} ({best[1]})"


def _speedup_cell(value: float | None) -> str:
    return ABSENT if value is None else f"{value:.2f}{TIMES}"


def _accuracy_cell(cell: Cell | None) -> str:
    if cell is None:
        return ABSENT
    return "null" if cell.best_val_accuracy is None else f"{cell.best_val_accuracy:.4f}"


def footnotes(table: dict[Row, dict[str, Cell]], strategies: list[str]) -> list[str]:
    one = len({d for _, d in table}) == 1
    repeated = [f"{row_label(row, one)}/{s} {cells[s].runs} runs"
                for row, cells in table.items() for s in strategies
                if s in cells and cells[s].runs > 1]
    notes = ["Speedup: none's wall time / the strategy's, same model; "
             "accuracy: the best over a cell's runs."]
    if repeated:
        notes.append(f"* median wall time of several runs: {', '.join(repeated)}.")
    return notes


def plot(table: dict[Row, dict[str, Cell]], strategies: list[str], out: Path,
         log_y: bool) -> Path:
    """Grouped bars: one group per model, one bar per strategy, speedup over none on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    one = len({d for _, d in table}) == 1
    rows = list(table)
    width = 0.8 / len(strategies)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) * len(strategies) / 2), 4.5))
    for i, strategy in enumerate(strategies):
        xs, heights, labels = [], [], []
        for x, row in enumerate(rows):
            cell = table[row].get(strategy)
            if cell is None:
                continue
            xs.append(x - 0.4 + width * (i + 0.5))
            heights.append(cell.wall_time_s)
            value = speedup(table[row], strategy)
            labels.append("" if value is None else f"{value:.2f}{TIMES}")
        bars = ax.bar(xs, heights, width, label=strategy)
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(rows)), [row_label(r, one) for r in rows])
    ax.set_ylabel("wall time (s)")
    if log_y:
        ax.set_yscale("log")
    ax.margins(y=0.12)
    ax.set_title("Hyperband wall time by packing strategy (speedup over none on each bar)",
                 fontsize=10)
    ax.legend(title="strategy", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out.resolve()


def compare(args: argparse.Namespace) -> None:
    if args.runs:
        results, searched = load_results_dirs(args.runs)
    else:
        results, searched = load_mlflow(args.mlflow, args.experiment)
    if args.dataset:
        results = [r for r in results if r.dataset == args.dataset]
        searched = f"dataset {args.dataset!r} in {searched}"
    if not results:
        raise UsageError(f"no finished tune runs found: searched {searched}")
    table = aggregate(results)
    strategies = strategy_order(table)
    console = Console()
    if not console.is_terminal:
        console.width = 160
    # soft_wrap: long paths stay on one line, so they can be copied.
    console.print(f"{len(results)} runs from {searched}", soft_wrap=True)
    for t in build_tables(table, strategies):
        console.print(t)
    found = agreements(results, strategies)
    datasets = {d for _, d in table}
    where = f" on {next(iter(datasets))}" if len(datasets) == 1 else ""
    if found:
        console.print(agreement_table(found, len(datasets) == 1, where))
        console.print("Drift: the largest |val_accuracy difference| of one trial at one rung "
                      "between runs of the same search; 0 for plain packs (bit-exact), float32 "
                      "rounding for fused packs.", highlight=False, soft_wrap=True)
    else:
        console.print("Decisions not compared: no two strategies have runs of the same search "
                      "with their trials recorded (results.json).", highlight=False,
                      soft_wrap=True)
    for note in footnotes(table, strategies):
        console.print(note, highlight=False, soft_wrap=True)
    chart = plot(table, strategies, args.out, args.log_y)
    console.print(f"chart: {chart}", highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        compare(args)
    except UsageError as e:
        print(f"compare_strategies: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
