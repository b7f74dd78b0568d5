"""What a new user meets in the first hour (issue 46), each as they meet it: a command's error
is one line and exit code 2, TensorFlow's banner stays off, and the docs site browses from
files."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from packexp.journal import Journal
from tests.helpers import ROOT, packexp

pytestmark = pytest.mark.process


def refused(cwd: Path, *args: str) -> str:
    """The one line ``python -m packexp *args`` prints, run in ``cwd``: exit code 2, nothing
    else on stderr, no traceback, and no run directory left behind."""
    done = packexp(*args, cwd=cwd, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("packexp: error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert not list((cwd / "outputs").glob("runs/*/.hydra")), "a refused run left its files"
    return lines[0].removeprefix("packexp: error: ")


@pytest.mark.parametrize(("args", "starts"), [
    (["seed=-1"], "seed=-1: must be an integer from 0 to 4294967295"),
    (["seed=4294967296"], "seed=4294967296: must be an integer from 0 to 4294967295"),
    (["scheduler=asha", "scheduler.R=1"], "scheduler.R=1: ASHA with eta=3, min_r=1 never "
                                          "promotes"),
    (["scheduler.R=2"], "scheduler.R=2: Hyperband with eta=3 needs R >= 3"),
    (["scheduler=pbt", "scheduler.epochs=4", "scheduler.interval=4"],
     "scheduler.interval=4: with epochs=4 no interval ends before the last epoch"),
    (["summary_top_k=abc"], "summary_top_k='abc': must be an integer >= 0"),
    (["device.gpu_memory_fraction=2"], "device.gpu_memory_fraction=2: must be a number in "
                                       "(0, 1]"),
], ids=["negative-seed", "seed-past-32-bits", "asha-R1", "hyperband-R2", "pbt-one-interval",
        "summary-top-k", "gpu-fraction"])
def test_a_value_no_library_should_see_is_one_line_naming_its_key(tmp_path, args, starts):
    assert refused(tmp_path, *args, "tracking=none").startswith(starts)


def test_the_smallest_R_that_halves_is_named_and_works(tmp_path):
    line = refused(tmp_path, "scheduler=asha", "scheduler.R=2", "tracking=none")
    assert line.endswith("the smallest R that works is 3"), line
    plan = packexp("task=plan", "scheduler=asha", "scheduler.R=3", "tracking=none",
                   f"hydra.run.dir={tmp_path / 'plan'}", cwd=tmp_path, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]


@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_run_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path, where):
    (tmp_path / "a_file").write_text("")
    run_dir = tmp_path / "a_file" / "run" if where == "file" else Path("/proc/packexp-run")
    line = refused(tmp_path, f"hydra.run.dir={run_dir}", "tracking=none")
    assert line.startswith(f"hydra.run.dir={run_dir}: cannot make this directory ("), line


def test_a_sweep_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path):
    (tmp_path / "a_file").write_text("")
    line = refused(tmp_path, "-m", f"hydra.sweep.dir={tmp_path / 'a_file' / 'sweep'}",
                   "seed=1,2", "tracking=none")
    assert line.startswith("hydra.sweep.dir="), line


def test_resume_without_a_run_directory_names_the_latest_unfinished_runs(tmp_path):
    runs = tmp_path / "outputs" / "runs"
    for name, finished in [("2026-01-01_10-00-00-000000", False),
                           ("2026-01-02_10-00-00-000000", True),
                           ("2026-01-03_10-00-00-000000", False)]:
        journal = Journal(runs / name)
        journal.path.parent.mkdir(parents=True)
        journal.append("start", config={}, overrides=[])
        if finished:
            journal.append("finished")
    (runs / "2026-01-04_10-00-00-000000").mkdir()  # no journal: a refused start's
    line = refused(tmp_path, "resume=true", "tracking=none")
    assert line == ("resume=true: give hydra.run.dir=<the run to continue>; the latest "
                    "unfinished runs under outputs/runs: "
                    "outputs/runs/2026-01-03_10-00-00-000000, "
                    "outputs/runs/2026-01-01_10-00-00-000000"), line
    assert sorted(p.name for p in runs.iterdir()) == [  # nothing made
        "2026-01-01_10-00-00-000000", "2026-01-02_10-00-00-000000",
        "2026-01-03_10-00-00-000000", "2026-01-04_10-00-00-000000"]


def test_resume_with_no_run_to_continue_says_so(tmp_path):
    line = refused(tmp_path, "resume=true", "tracking=none")
    assert line == ("resume=true: give hydra.run.dir=<the run to continue>; there is no "
                    "unfinished run under outputs/runs")


@pytest.mark.parametrize("user_level", [None, "0"])
def test_importing_packexp_keeps_tensorflow_s_banner_off_unless_the_user_asks(tmp_path,
                                                                             user_level):
    """A user's own ``import keras`` after ``import packexp`` (README, "From Python")."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if user_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = user_level
    done = subprocess.run([sys.executable, "-c", "import packexp, keras; print(keras.Input)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    banner = "absl::InitializeLog" in done.stderr or "cuda drivers" in done.stderr
    assert banner == (user_level == "0"), done.stderr[-2000:]


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
    import socket
    import time
    import urllib.request

    import psutil

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
