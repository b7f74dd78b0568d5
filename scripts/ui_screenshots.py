"""Screenshots of the MLflow UI over a fresh sweep: python scripts/ui_screenshots.py [--out DIR].

Runs docs/tracking.md's four-strategy sweep into a store of its own, serves it with
``mlflow server`` on loopback, and drives headless Chromium through the DevTools protocol:

- ``runs.png``: the experiment's runs table with every parent's trials unfolded;
- ``parent_charts.png``: one parent run's metric charts (per pack and over the search);
- ``parent_memory.png``: the same run's memory and step-time charts (``_mb``, ``_ms``);
- ``compare_parallel.png``: the compare view's parallel coordinates over the four
  strategies' parent runs: the ``strategy`` param and three metrics;
- ``compare.png``: the compare view's tables of those runs.

Every process it starts (the sweep, the server with its workers, Chromium) runs in a process
group of its own and is ended with its whole group. Needs ``chromium`` on the PATH
(``apt-get install chromium``); the WebSocket client is aiohttp, which MLflow installs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("none", "batch_size", "random", "knn")
WINDOW = (1600, 1000)
COMPARE_HEIGHT = 1700


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui",
                        help="where the PNGs go (default: docs/ui)")
    parser.add_argument("--store", type=Path,
                        help="reuse this folder's sweep store (mlflow.db) instead of running one")
    parser.add_argument("--keep", type=Path,
                        help="run the sweep into this folder and keep it (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the server and for each page")
    parser.add_argument("overrides", nargs="*",
                        help="extra Hydra overrides for the sweep (e.g. scheduler.R=3)")
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def process_group(cmd: list[str], **kwargs: Any) -> Iterator[subprocess.Popen]:
    """Runs ``cmd`` in a new session and ends its whole process group on the way out.

    ``mlflow server`` starts workers of its own in its group, which can outlive the leader,
    so the group, not only the leader, must be gone before this returns.
    """
    proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    try:
        yield proc
    finally:
        pgid = proc.pid  # start_new_session: the leader's pid is the group's id
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
            deadline = time.monotonic() + grace
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not group_alive(pgid):
                break
        proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_sweep(folder: Path, overrides: list[str]) -> Path:
    """The four strategies, one job after another, tracked in ``folder/store``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "-m", "packexp", "-m", f"strategy={','.join(STRATEGIES)}",
           f"tracking.store_dir={folder / 'store'}", f"hydra.sweep.dir={folder / 'sweep'}",
           *overrides]
    print("sweep:", " ".join(cmd[1:]), flush=True)
    with process_group(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True) as proc:
        _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"ui_screenshots: the sweep failed:\n{err[-3000:]}")
    return folder / "store"


def get_json(url: str, body: dict | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"ui_screenshots: {url} did not answer within {timeout:.0f} s")
            time.sleep(0.5)


def parents(server: str) -> tuple[str, dict[str, str]]:
    """The experiment id and each strategy's parent run id, through the REST API."""
    api = f"{server}/api/2.0/mlflow"
    experiment = get_json(f"{api}/experiments/get-by-name?experiment_name=packexp")
    experiment_id = experiment["experiment"]["experiment_id"]
    runs = get_json(f"{api}/runs/search", {"experiment_ids": [experiment_id],
                                            "filter": "tags.task = 'tune'",
                                            "max_results": 1000})["runs"]
    found = {}
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        if "mlflow.parentRunId" not in tags:
            found.setdefault(tags["strategy"], run["info"]["run_id"])
    missing = [s for s in STRATEGIES if s not in found]
    if missing:
        sys.exit(f"ui_screenshots: no parent run for {missing} in the store")
    return experiment_id, found


class Browser:
    """One headless Chromium page, driven through the DevTools protocol."""

    def __init__(self, ws_url: str) -> None:
        self.ws_url = ws_url
        self._id = 0

    async def __aenter__(self) -> Browser:
        import aiohttp

        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(self.ws_url, max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._ws.close()
        await self._session.close()

    async def send(self, method: str, **params: Any) -> dict:
        self._id += 1
        await self._ws.send_json({"id": self._id, "method": method, "params": params})
        while True:
            message = await self._ws.receive_json()
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def click_at(self, expression: str) -> None:
        """A mouse click where ``expression`` (JS, giving ``[x, y]``) says: a real one, which
        a widget that listens for mousedown (a select box) takes."""
        x, y = await self.evaluate(expression)
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                            clickCount=1)

    async def type(self, text: str) -> None:
        """Types ``text`` into the focused element, as keystrokes would."""
        await self.send("Input.insertText", text=text)

    async def press(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key,
                            windowsVirtualKeyCode=code)

    async def wait_until(self, expression: str, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not await self.evaluate(expression):
            if time.monotonic() > deadline:
                shot = Path(tempfile.gettempdir()) / "ui_screenshots-timeout.png"
                await self.screenshot(shot)
                raise TimeoutError(f"the page did not show {what} within {timeout:.0f} s "
                                   f"(it showed {shot})")
            await asyncio.sleep(0.5)

    async def screenshot(self, path: Path) -> None:
        await asyncio.sleep(1.5)  # let charts finish their entry animation
        shot = await self.send("Page.captureScreenshot", format="png")
        save_png(base64.b64decode(shot["data"]), path)


def save_png(data: bytes, path: Path) -> None:
    """Writes a palette PNG: the UI's flat colours survive, the file shrinks about 3x."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    image = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1024} KB)", flush=True)


def text_shown(*needles: str) -> str:
    """A JS test: every needle appears in the page's visible text."""
    checks = " && ".join(f"document.body.innerText.includes({json.dumps(n)})" for n in needles)
    return f"(document.body !== null && {checks})"


def click(text: str = "", label: str = "") -> str:
    """A JS action: clicks the first button whose text or aria-label is this; true if found."""
    return f"""(() => {{
  const b = [...document.querySelectorAll('button')].find(b =>
    ({json.dumps(text)} && b.innerText.trim() === {json.dumps(text)}) ||
    ({json.dumps(label)} && b.getAttribute('aria-label') === {json.dumps(label)}));
  if (b) b.click();
  return Boolean(b);
}})()"""


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
PLOT_METRICS = ["best_val_accuracy", "wall_time_s", "median_member_step_time_ms"]


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

# MLflow 3.17's UI chooses an experiment's pages by its sidebar switch (GenAI / Model
# training), remembered by the browser, not by the experiment's mlflow.experimentKind tag;
# this URL parameter is the switch.
TRAINING = "workflowType=machine_learning"


async def shoot(server: str, devtools: str, experiment_id: str, runs: dict[str, str],
                out: Path, timeout: float) -> None:
    async with Browser(devtools) as page:
        await page.send("Emulation.setDeviceMetricsOverride", width=WINDOW[0],
                        height=WINDOW[1], deviceScaleFactor=1, mobile=False)
        # 1. The runs table, every parent unfolded to its trials.
        await page.goto(f"{server}/#/experiments/{experiment_id}?{TRAINING}")
        await page.wait_until(text_shown("Expand rows", "knn-mlp3-digits"), timeout,
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
        await page.evaluate(remove_tags([*PLOT_PARAMS_DROPPED, "step_time_ms"]))
        for metric in PLOT_METRICS:
            await page.click_at(METRICS_BOX)
            await page.type(metric)
            await asyncio.sleep(0.5)  # the options filter as the name is typed
            await page.press("Enter", 13)
            await page.press("Escape", 27)
        chosen = json.dumps(",".join(["strategy", *PLOT_METRICS]))
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
        await page.send("Emulation.setDeviceMetricsOverride", width=WINDOW[0],
                        height=COMPARE_HEIGHT, deviceScaleFactor=1, mobile=False)
        await page.screenshot(out / "compare.png")


def devtools_page(port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            pages = [t for t in get_json(f"http://127.0.0.1:{port}/json/list")
                     if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit("ui_screenshots: Chromium's DevTools endpoint did not come up")
        time.sleep(0.3)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("ui_screenshots: error: chromium not found (apt-get install chromium)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ui_screenshots-") as tmp:
        if args.store is not None:
            store = args.store
            if not (store / "mlflow.db").is_file():
                print(f"ui_screenshots: error: --store {store}: no mlflow.db there",
                      file=sys.stderr)
                return 2
        else:
            folder = args.keep or Path(tmp)
            store = run_sweep(folder.resolve(), args.overrides)
        port, debug_port = free_port(), free_port()
        server = f"http://127.0.0.1:{port}"
        serve = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
                 "--port", str(port), "--workers", "1",
                 "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
                 "--default-artifact-root", (store / "mlartifacts").as_uri()]
        browse = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                  "--hide-scrollbars", f"--remote-debugging-port={debug_port}",
                  f"--user-data-dir={Path(tmp) / 'chromium'}",
                  f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        with process_group(serve, cwd=tmp, **quiet), process_group(browse, **quiet):
            wait_for(f"{server}/health", args.timeout)
            experiment_id, runs = parents(server)
            asyncio.run(shoot(server, devtools_page(debug_port, args.timeout), experiment_id,
                              runs, args.out, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
