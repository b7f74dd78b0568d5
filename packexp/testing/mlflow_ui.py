"""The real MLflow UI on loopback, driven in headless Chromium through the DevTools protocol."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packexp.testing.processes import free_port

WINDOW = (1600, 1000)
# The network is closed: Chromium must not try to reach Google's services at start-up.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")
# MLflow 3.17's UI chooses an experiment's pages by its sidebar switch (GenAI / Model
# training), remembered by the browser, not by the experiment's mlflow.experimentKind tag;
# this URL parameter is the switch.
TRAINING = "workflowType=machine_learning"


def chromium() -> str | None:
    """Chromium's command on the PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


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


def get_json(url: str, body: dict | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Returns once ``url`` answers; a ``TimeoutError`` after ``timeout`` seconds, or a
    ``RuntimeError`` as soon as ``proc`` (the server that should answer) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{url}: the server exited ({proc.returncode})") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.5)


@dataclass(frozen=True)
class ServedUi:
    """A store served on loopback and a headless Chromium beside it."""

    url: str
    devtools: str  # the WebSocket of Chromium's page

    def experiment_id(self, name: str) -> str:
        return get_json(f"{self.url}/api/2.0/mlflow/experiments/get-by-name"
                        f"?experiment_name={name}")["experiment"]["experiment_id"]

    def runs(self, experiment_id: str, query: str = "") -> list[dict]:
        return get_json(f"{self.url}/api/2.0/mlflow/runs/search",
                        {"experiment_ids": [experiment_id], "filter": query,
                         "max_results": 1000})["runs"]


@contextlib.contextmanager
def served_ui(store: Path, timeout: float = 120.0,
              log: Path | None = None) -> Iterator[ServedUi]:
    """``mlflow server`` over ``store`` (its ``mlflow.db`` and ``mlartifacts``) on a free
    loopback port, and headless Chromium; both process groups are gone when this returns.
    ``log`` takes the server's output (by default, nowhere)."""
    browser = chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not on the PATH (apt-get install chromium)")
    port, debug_port = free_port(), free_port()
    serve = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
             "--default-artifact-root", (store / "mlartifacts").as_uri()]
    # Serving a store needs no job runner: without it the server starts no huey consumers.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with tempfile.TemporaryDirectory(prefix="mlflow-ui-") as tmp, \
            open(log or os.devnull, "w") as out:
        browse = [browser, *CHROMIUM_FLAGS, f"--remote-debugging-port={debug_port}",
                  f"--user-data-dir={Path(tmp) / 'chromium'}",
                  f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"]
        with process_group(serve, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT) \
                as server, process_group(browse, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL):
            url = f"http://127.0.0.1:{port}"
            wait_for(f"{url}/health", timeout, server)
            yield ServedUi(url, devtools_page(debug_port, timeout))


def devtools_page(port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            pages = [t for t in get_json(f"http://127.0.0.1:{port}/json/list")
                     if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"Chromium's DevTools endpoint did not come up in {timeout:.0f} s")
        time.sleep(0.3)


class Browser:
    """One headless Chromium page, driven through the DevTools protocol."""

    def __init__(self, ws_url: str) -> None:
        self.ws_url = ws_url
        self._id = 0

    async def __aenter__(self) -> Browser:
        import aiohttp  # MLflow installs it

        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(self.ws_url, max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.resize(*WINDOW)
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

    async def resize(self, width: int, height: int) -> None:
        await self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                        deviceScaleFactor=1, mobile=False)

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
                shot = Path(tempfile.gettempdir()) / "mlflow-ui-timeout.png"
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
