"""The real MLflow UI in headless Chromium over a served multirun's store (two strategies, two
seeds): the runs table's saved view shows each parent's strategy, seed, job and best value; the
plain table shows the words of each name that tell the parents apart; the compare view plots
``best_value`` first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from packexp.testing.command import packexp
from packexp.testing.mlflow_ui import (
    TRAINING,
    Browser,
    chromium,
    click,
    served_ui,
    text_shown,
)
from packexp.tracking.mlflow_view import VIEW_ID

pytestmark = [pytest.mark.process, pytest.mark.slow]

STRATEGIES, SEEDS = ("knn", "random"), (0, 1)
TIMEOUT = 120.0
NAME = "attributes.`Run Name`"
WIDE = (2200, 1000)

# Each row of the runs table (its cells by column id, as ag-grid renders them).
ROWS = """(() => {
  const rows = {};
  for (const row of document.querySelectorAll('.ag-row[row-index]')) {
    const cells = rows[row.getAttribute('row-index')] ??= {};
    for (const cell of row.querySelectorAll('.ag-cell[col-id]'))
      cells[cell.getAttribute('col-id')] = cell.innerText.trim();
  }
  return Object.values(rows);
})()"""

# Each run name and the characters of it the table shows before its ellipsis: those whose
# box ends left of the clipping box's edge less the ellipsis' width.
NAMES_SHOWN = """(() => {
  const shown = [];
  for (const cell of document.querySelectorAll('.ag-cell[col-id="attributes.`Run Name`"]')) {
    const text = document.createTreeWalker(cell.querySelector('a'), NodeFilter.SHOW_TEXT)
      .nextNode();
    let right = cell.getBoundingClientRect().right;
    for (let e = text.parentElement; e !== cell.parentElement; e = e.parentElement)
      if (getComputedStyle(e).overflow !== 'visible')
        right = Math.min(right, e.getBoundingClientRect().right);
    const context = document.createElement('canvas').getContext('2d');
    context.font = getComputedStyle(text.parentElement).font;
    right -= context.measureText('\\u2026').width;
    const range = document.createRange();
    let fits = 0;
    range.setStart(text, 0);
    for (let k = 1; k <= text.length; k++) {
      range.setEnd(text, k);
      if (range.getBoundingClientRect().right > right) break;
      fits = k;
    }
    shown.push([text.textContent, text.textContent.slice(0, fits)]);
  }
  return shown;
})()"""

# The metrics the compare view's parallel-coordinates plot starts on.
PLOTTED = """[...document.querySelectorAll('.du-bois-light-select-selector')][1]
  .innerText.split('\\n').map(s => s.trim()).filter(Boolean)"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """``python -m packexp -m strategy=knn,random seed=0,1`` on simulated workers (the fake
    trainer: seconds, no TensorFlow), tracked in a store of its own."""
    if chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): this test drives "
                    "the MLflow UI in it")
    root = tmp_path_factory.mktemp("ui")
    out = packexp("-m", f"strategy={','.join(STRATEGIES)}", f"seed={','.join(map(str, SEEDS))}",
                  "executor=simulated", "scheduler.R=3", "tracking=mlflow",
                  f"tracking.store_dir={root / 'store'}", f"hydra.sweep.dir={root / 'multirun'}")
    assert out.returncode == 0, out.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def pages(sweep) -> dict:
    """What the UI shows: the plain runs table's names, the saved view's rows, the compare
    view's plotted metrics."""
    with served_ui(sweep / "store", TIMEOUT, log=sweep / "server.log") as ui:
        return asyncio.run(read(ui, sweep))


async def read(ui, sweep: Path) -> dict:
    experiment = ui.experiment_id("packexp")
    parents = [r["info"]["run_id"] for r in ui.runs(experiment, "tags.task = 'tune'")
               if "mlflow.parentRunId" not in {t["key"] for t in r["data"]["tags"]}]
    four = f"document.querySelectorAll('.ag-row[row-index]').length >= {len(parents)}"
    async with Browser(ui.devtools) as page:
        # As docs/tracking.md opens it first: the experiment's page, no view chosen.
        await page.goto(f"{ui.url}/#/experiments/{experiment}?{TRAINING}")
        await page.wait_until(f"{text_shown('Run Name')} && {four}", TIMEOUT, "the runs table")
        names = await page.evaluate(NAMES_SHOWN)
        # Wide enough for every column of the view: the grid renders only those in sight.
        await page.resize(*WIDE)
        await page.goto(f"{ui.url}/#/experiments/{experiment}/runs?viewStateShareKey={VIEW_ID}"
                        f"&{TRAINING}")
        await page.wait_until(f"{text_shown('strategy')} && {four}", TIMEOUT, "the saved view")
        await page.evaluate(click(label="Close"))  # the MLflow Assistant side panel
        await page.wait_until(text_shown("best_value", "trials"), TIMEOUT,
                              "the saved view's metrics")
        rows = await page.evaluate(ROWS)
        await page.screenshot(sweep / "view.png")  # for a failure's reader
        await page.goto(f"{ui.url}/#/compare-runs?runs={json.dumps(parents)}"
                        f"&experiments={json.dumps([experiment])}&{TRAINING}")
        await page.wait_until(text_shown("Parallel Coordinates Plot", "Metrics:"), TIMEOUT,
                              "the compare view")
        plotted = await page.evaluate(PLOTTED)
    return {"parents": parents, "names": names, "rows": rows, "plotted": plotted}


def jobs(sweep: Path) -> dict[str, dict]:
    """Each job's results.json, by its number."""
    return {path.parent.name: json.loads(path.read_text())
            for path in sorted((sweep / "multirun").glob("*/results.json"))}


def test_the_saved_view_shows_each_parents_strategy_seed_job_and_best_value(pages, sweep):
    expected = {(r["strategy"], str(r["seed"]), job, r["best"]["value"], len(r["trials"]))
                for job, r in jobs(sweep).items()}
    assert {(s, str(seed)) for s in STRATEGIES for seed in SEEDS} == {e[:2] for e in expected}
    shown = {(row["params.`strategy`"], row["params.`seed`"], row["tags.`job_num`"],
              float(row["metrics.`best_value`"]), int(row["metrics.`trials`"]))
             for row in pages["rows"]}
    assert len(shown) == len(pages["parents"]) == len(expected)
    # The UI shows six significant digits.
    assert sorted(shown) == [(s, seed, job, pytest.approx(value, rel=1e-5), trials)
                             for s, seed, job, value, trials in sorted(expected)]
    for row in pages["rows"]:
        assert row[NAME].endswith(f"{row['params.`strategy`']}-j{row['tags.`job_num`']}"
                                  f"-s{row['params.`seed`']}-mlp3-digits-accuracy-hyperband-R3")


def test_the_runs_table_shows_the_words_of_each_name_that_tell_the_parents_apart(pages, sweep):
    results = jobs(sweep)
    assert len(pages["names"]) == len(results)
    for name, shown in pages["names"]:
        job = name.split("-")[1].removeprefix("j")
        lead = f"{results[job]['strategy']}-j{job}-s{results[job]['seed']}-"
        assert name.startswith(lead)
        assert shown.startswith(lead), (name, shown)
    assert len({shown for _, shown in pages["names"]}) == len(results)


def test_the_compare_view_plots_the_best_value_first(pages):
    assert pages["plotted"] == ["best_value"]
