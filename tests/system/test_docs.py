"""The docs as a user meets them: the site browses from files, and their commands do what
they say."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psutil
import pytest

from packexp.testing.config import ROOT

pytestmark = pytest.mark.process


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if k in ("href", "src") and v]


def test_the_docs_site_browses_from_files(tmp_path):
    """Every link of every page of ``make docs``'s site opens a file, as a browser opening
    ``site/index.html`` from disk follows it (no server to turn a folder into its index)."""
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (site / "index.html").is_file()
    broken = []
    # 404.html is a server's page (its links are absolute); a file browser never opens it.
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    for page in pages:
        links = Links()
        links.feed(page.read_text())
        for href in links.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, or an anchor on this page
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert len(pages) > 20
    assert not broken, broken[:10]


def ui_block() -> list[str]:
    """docs/tracking.md's commands that start the MLflow UI and stop it."""
    text = (ROOT / "docs" / "tracking.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in text.split("```")[1::2] if "kill -- -" in b]
    assert len(blocks) == 1, "docs/tracking.md gives one block that starts and stops the UI"
    return [line for line in blocks[0].splitlines() if line.strip()]


def test_the_documented_mlflow_ui_stop_ends_every_process_the_ui_started(tmp_path):
    """``mlflow ui`` starts uvicorn, a job runner and seven huey consumers; stopped by its
    PID it leaves them running. The docs' stop line ends them all."""
    lines = ui_block()
    stop = next(line for line in lines if line.startswith("kill"))
    start = [line for line in lines if line != stop]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = "\n".join(line.replace("sqlite:///outputs/mlflow.db",
                                    f"sqlite:///{tmp_path / 'mlflow.db'}")
                       .replace("5000", str(port)) for line in start)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # set -m: a script's jobs get process groups of their own, as a terminal's do.
    with open(tmp_path / "ui.log", "w") as log:
        subprocess.run(["bash", "-c", f"set -m\n{script}\necho $ui > ui.pid"], cwd=tmp_path,
                       env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=60)
    ui = int((tmp_path / "ui.pid").read_text())
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
                time.sleep(0.5)
        started = psutil.Process(ui).children(recursive=True)
        assert len(started) >= 3, started  # uvicorn, the job runner, huey consumers
        subprocess.run(["bash", "-c", f"ui={ui}\n{stop}"], cwd=tmp_path, env=env, check=True,
                       timeout=60)
        _, alive = psutil.wait_procs([psutil.Process(ui), *started], timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ui, signal.SIGKILL)
