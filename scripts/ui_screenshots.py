"""Screenshots of the MLflow UI over a fresh sweep: python scripts/ui_screenshots.py [--out DIR].

Runs docs/tracking.md's four-strategy sweep into a store of its own, serves it with
``mlflow server`` on loopback, and drives headless Chromium through the DevTools protocol:

- ``runs.png``: the experiment's runs table with every parent's trials unfolded;
- ``parent_charts.png``: one parent run's metric charts (per pack and over the search);
- ``parent_memory.png``: the same run's memory and step-time charts (``_mb``, ``_ms``);
- ``compare_parallel.png``: the compare view's parallel coordinates over the four
  strategies' parent runs: the ``strategy`` param and three metrics;
- ``compare.png``: the compare view's tables of those runs;
- ``searches.png``: from a sweep of its own over two strategies and two seeds, the runs table
  in the view packexp saves on its experiments (``tracking/mlflow_view.py``).

Every process it starts (the sweeps, the server with its workers, Chromium) runs in a process
group of its own and is ended with its whole group (``packexp/testing/mlflow_ui.py``, the
driver tests/system/test_mlflow_ui.py shares). Needs ``chromium`` on the PATH (``apt-get
install chromium``); the WebSocket client is aiohttp, which MLflow installs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from packexp.testing.mlflow_ui import (
    TRAINING,
    WINDOW,
    Browser,
    ServedUi,
    chromium,
    click,
    process_group,
    served_ui,
    text_shown,
)
from packexp.tracking.mlflow_view import VIEW_ID

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("none", "batch_size", "random", "knn")
# Each sweep's overrides: the four strategies, and two strategies at two seeds.
SWEEPS = {"strategies": [f"strategy={','.join(STRATEGIES)}"],
          "searches": ["strategy=knn,random", "seed=0,1"]}
COMPARE_HEIGHT = 1700
SEARCHES_WINDOW = (1800, 500)  # the saved view's columns, whole, beside the sidebar


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui",
                        help="where the PNGs go (default: docs/ui)")
    parser.add_argument("--sweep", choices=[*SWEEPS, "all"], default="all",
                        help="which sweep's pictures: strategies (the first five), searches "
                             "(searches.png) or all")
    parser.add_argument("--store", type=Path,
                        help="reuse this folder's sweep store (mlflow.db) instead of running one "
                             "(with one --sweep)")
    parser.add_argument("--keep", type=Path,
                        help="run the sweeps into this folder and keep them (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the server and for each page")
    parser.add_argument("overrides", nargs="*",
                        help="extra Hydra overrides for the sweep (e.g. scheduler.R=3)")
    return parser.parse_args(argv)


def run_sweep(folder: Path, sweep: str, overrides: list[str]) -> Path:
    """The ``SWEEPS[sweep]`` multirun, one job after another, tracked in ``folder/store``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "-m", "packexp", "-m", *SWEEPS[sweep],
           f"tracking.store_dir={folder / 'store'}", f"hydra.sweep.dir={folder / 'sweep'}",
           *overrides]
    print("sweep:", " ".join(cmd[1:]), flush=True)
    with process_group(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True) as proc:
        _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"ui_screenshots: the sweep failed:\n{err[-3000:]}")
    return folder / "store"


def parents(ui: ServedUi) -> tuple[str, dict[str, str]]:
    """The experiment id and each strategy's parent run id, through the REST API."""
    experiment_id = ui.experiment_id("packexp")
    runs = ui.runs(experiment_id, "tags.task = 'tune'")
    found = {}
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        if "mlflow.parentRunId" not in tags:
            found.setdefault(tags["strategy"], run["info"]["run_id"])
    missing = [s for s in STRATEGIES if s not in found]
    if missing:
        sys.exit(f"ui_screenshots: no parent run for {missing} in the store")
    return experiment_id, found


# The "+" beside each parent run's name in the runs table (its run-name cell's only button).
UNFOLD_PARENTS = """(() => {
  const buttons = document.querySelectorAll('button[data-component-id*="runnamecellrenderer"]');
  buttons.forEach(b => b.click());
  return buttons.length;
})()"""

# Plotly's per-chart toolbars, drawn over the charts of a page that never saw a mouse.
HIDE_CHART_TOOLBARS = """(() => {
  const style = document.createElement('style');
  style.textContent = '.modebar-container { display: none !important; }';
  document.head.appendChild(style);
  return true;
})()"""

def collapse(section: str) -> str:
    """A JS action: clicks the compare page's header of ``section``, which folds it away."""
    return f"""(() => {{
  const name = {json.dumps(section)};
  const header = [...document.querySelectorAll('[role=button], button, div, span')]
    .find(e => e.childElementCount <= 2 && e.innerText && e.innerText.trim() === name);
  if (header) header.click();
  return Boolean(header);
}})()"""


# The compare page's metrics table is a virtualised grid in a box 300 px high: grow the box
# to the whole table, and a resize event makes the grid render every row.
UNSCROLL_METRICS = """(async () => {
  const link = [...document.querySelectorAll('a')]
    .find(e => e.textContent.trim() === 'best_val_accuracy');
  const box = link && link.closest('.du-bois-light-collapse-content-box');
  if (!box) return false;
  // The names and the values are two grids scrolled together.
  for (const grid of box.querySelectorAll('.ReactVirtualized__Grid')) {
    const inner = grid.querySelector('.ReactVirtualized__Grid__innerScrollContainer');
    const height = (inner ? inner.scrollHeight : grid.scrollHeight) + 'px';
    for (let e = grid; e && e !== box; e = e.parentElement) {
      e.style.height = height;
      e.style.maxHeight = 'none';
    }
  }
  window.dispatchEvent(new Event('resize'));
  await new Promise(resolve => setTimeout(resolve, 1000));
  return true;
})()"""

# The parent run's charts of memory and step time: the search box filters them by name.
MEMORY_AND_STEP_TIME = "_m"
SEARCH_CHARTS = """(() => {
  const box = document.querySelector("input[placeholder='Search metric charts']");
  if (box) box.focus();
  return Boolean(box);
})()"""

# The compare page's parallel-coordinates plot starts on the first three params that differ
# and the first metric: the strategy's param alone, and metrics that tell the runs apart.
PLOT_PARAMS_DROPPED = ["strategy.key", "strategy.threshold"]
PLOT_METRICS = ["wall_time_s", "median_member_step_time_ms"]  # after best_value, the first


def remove_tags(names: list[str]) -> str:
    """A JS action: removes these choices from the plot's select boxes; how many it found."""
    return f"""(() => {{
  let removed = 0;
  for (const item of document.querySelectorAll('.du-bois-light-select-selection-item')) {{
    const text = item.querySelector('.du-bois-light-select-selection-item-content');
    const remove = item.querySelector('.du-bois-light-select-selection-item-remove');
    if (text && remove && {json.dumps(names)}.includes(text.textContent.trim())) {{
      remove.click();
      removed++;
    }}
  }}
  return removed;
}})()"""


# Where to click to open the plot's metrics select box (the second), beside its choices.
METRICS_BOX = """(() => {
  const r = document.querySelectorAll('.du-bois-light-select-selector')[1]
    .getBoundingClientRect();
  return [r.x + r.width - 40, r.y + r.height / 2];
})()"""

async def shoot(ui: ServedUi, out: Path, timeout: float) -> None:
    """The strategies sweep's five pictures."""
    server = ui.url
    experiment_id, runs = parents(ui)
    async with Browser(ui.devtools) as page:
        # 1. The runs table, every parent unfolded to its trials.
        await page.goto(f"{server}/#/experiments/{experiment_id}?{TRAINING}")
        await page.wait_until(text_shown("Expand rows", "knn-j3-s0-mlp3"), timeout,
                              "the runs table")
        await page.evaluate(click(label="Close"))  # the MLflow Assistant side panel
        if not await page.evaluate(UNFOLD_PARENTS):
            raise RuntimeError("found no run-name expander to unfold the trials")
        await page.wait_until(text_shown("b2-t000", "b0-t000"), timeout, "the nested trials")
        await page.screenshot(out / "runs.png")

        # 2. One parent's metric charts (knn: the strategy that packs).
        await page.goto(f"{server}/#/experiments/{experiment_id}/runs/{runs['knn']}"
                        f"/model-metrics?{TRAINING}")
        # (The charts are drawn as they scroll into view: wait for the first row's.)
        await page.wait_until(text_shown("best_so_far_val_accuracy", "build_s") +
                              " && document.querySelectorAll('.js-plotly-plot').length >= 6",
                              timeout, "the parent's charts")
        await page.evaluate(HIDE_CHART_TOOLBARS)
        await page.screenshot(out / "parent_charts.png")

        # 3. The same parent's memory and step-time charts.
        if not await page.evaluate(SEARCH_CHARTS):
            raise RuntimeError("found no search box over the parent's charts")
        await page.type(MEMORY_AND_STEP_TIME)
        await page.wait_until(text_shown("peak_rss_mb", "pack_memory_mb", "median_step_time_ms")
                              + " && !document.body.innerText.includes('build_s')",
                              timeout, "the memory and step-time charts")
        await page.evaluate(HIDE_CHART_TOOLBARS)
        await page.screenshot(out / "parent_memory.png")

        # 4. The compare view of the four strategies' parents: its parallel coordinates.
        ids = json.dumps([runs[s] for s in STRATEGIES])
        await page.goto(f"{server}/#/compare-runs?runs={ids}&experiments="
                        f"{json.dumps([experiment_id])}&{TRAINING}")
        await page.wait_until(text_shown("best_val_accuracy", *STRATEGIES),
                              timeout, "the compare table")
        await page.evaluate(click(label="Close"))  # the MLflow Assistant side panel
        await page.wait_until(text_shown("Parallel Coordinates Plot", "Metrics:"), timeout,
                              "the parallel-coordinates plot")
        await page.evaluate(remove_tags(PLOT_PARAMS_DROPPED))
        for metric in PLOT_METRICS:
            await page.click_at(METRICS_BOX)
            await page.type(metric)
            await asyncio.sleep(0.5)  # the options filter as the name is typed
            await page.press("Enter", 13)
            await page.press("Escape", 27)
        chosen = json.dumps(",".join(["strategy", "best_value", *PLOT_METRICS]))
        await page.wait_until(
            "[...document.querySelectorAll('.du-bois-light-select-selection-item-content')]"
            f".map(e => e.textContent.trim()).join() === {chosen}",
            timeout, "the plot's chosen param and metrics")
        await page.screenshot(out / "compare_parallel.png")

        # 5. The compare view's tables, the plot folded away; of the params and tags, only
        # those that differ (the strategy's), so the metrics show.
        await page.evaluate(click(label="Parameters - Show diff only"))
        await page.evaluate(click(label="Tags - Show diff only"))
        await page.evaluate(collapse("Visualizations"))
        await page.evaluate(collapse("Artifacts"))
        await page.wait_until(text_shown("median_step_time_ms"), timeout, "the compared metrics")
        if not await page.evaluate(UNSCROLL_METRICS):
            raise RuntimeError("found no metrics table on the compare page")
        # Tall enough for the run names and the metrics the table renders (it is virtual, 300
        # px high: the rows past packed_train_s, the search's totals among them, need
        # scrolling).
        await page.resize(WINDOW[0], COMPARE_HEIGHT)
        await page.screenshot(out / "compare.png")


async def shoot_searches(ui: ServedUi, out: Path, timeout: float) -> None:
    """The searches sweep's picture: its runs table in packexp's saved view."""
    experiment_id = ui.experiment_id("packexp")
    async with Browser(ui.devtools) as page:
        await page.resize(*SEARCHES_WINDOW)
        await page.goto(f"{ui.url}/#/experiments/{experiment_id}/runs"
                        f"?viewStateShareKey={VIEW_ID}&{TRAINING}")
        await page.wait_until(text_shown("best_value", "trials", "random-j3-s1") +
                              " && document.querySelectorAll('.ag-row[row-index]').length >= 4",
                              timeout, "the saved view of the runs table")
        await page.evaluate(click(label="Close"))  # the MLflow Assistant side panel
        await page.screenshot(out / "searches.png")


SHOTS = {"strategies": shoot, "searches": shoot_searches}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if chromium() is None:
        print("ui_screenshots: error: chromium not found (apt-get install chromium)",
              file=sys.stderr)
        return 2
    sweeps = list(SWEEPS) if args.sweep == "all" else [args.sweep]
    if args.store is not None:
        if len(sweeps) > 1:
            print("ui_screenshots: error: --store needs one --sweep", file=sys.stderr)
            return 2
        if not (args.store / "mlflow.db").is_file():
            print(f"ui_screenshots: error: --store {args.store}: no mlflow.db there",
                  file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="ui_screenshots-") as tmp:
        for sweep in sweeps:
            store = args.store or run_sweep((args.keep or Path(tmp)).resolve() / sweep, sweep,
                                            args.overrides)
            with served_ui(store, args.timeout) as ui:
                asyncio.run(SHOTS[sweep](ui, args.out, args.timeout))
    for png in sorted(args.out.glob("*.png")):
        print(f"{png} ({png.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
