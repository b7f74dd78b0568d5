"""A real sweep's store served by ``mlflow server``, read back through its REST API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

STRATEGIES = ["none", "batch_size", "random", "knn"]
EXPERIMENT = "served-sweep"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """docs/tracking.md's four-strategy multirun (quick size), tracked in a store of its own."""
    root = tmp_path_factory.mktemp("served")
    out = packexp("-m", f"strategy={','.join(STRATEGIES)}", "experiment=quick",
                  "tracking=mlflow", f"tracking.store_dir={root / 'store'}",
                  f"tracking.experiment={EXPERIMENT}", f"hydra.sweep.dir={root / 'multirun'}")
    assert out.returncode == 0, out.stderr[-3000:]
    return root


def packexp(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "packexp", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of the process group ``pgid``."""
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
    return members


def stop_group(proc: subprocess.Popen, started: list[psutil.Process]) -> None:
    """Ends the server's whole process group (uvicorn and whatever it started)."""
    pgid = proc.pid  # start_new_session=True: the server leads its own group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    # Anything it started that left the group is still ours to end, by its own pid.
    for p in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(sweep):
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [str(mlflow)] if mlflow.exists() else [sys.executable, "-m", "mlflow"]
    log = open(sweep / "server.log", "w")  # noqa: SIM115 (closed at teardown)
    # Serving a store needs no job runner: without it, the server starts no huey consumers
    # (seven processes, each importing MLflow). test_docs.py stops a UI that has them.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [*command, "server", "--backend-store-uri", f"sqlite:///{sweep / 'store' / 'mlflow.db'}",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=sweep, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (sweep / "server.log").read_text()[-3000:]
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    break
            assert time.monotonic() < deadline, "mlflow server did not answer /health"
            time.sleep(0.5)
        started = psutil.Process(proc.pid).children(recursive=True)
        yield url, proc, started
    finally:
        started = started or _children(proc.pid)
        stop_group(proc, started)
        log.close()
        assert not group_members(proc.pid), "mlflow server processes outlived the test"
        assert not [p for p in started if p.is_running()
                    and p.status() != psutil.STATUS_ZOMBIE], "server workers outlived the test"


def _children(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


def call(url: str, endpoint: str, body: dict | None = None, **query: str) -> dict:
    address = f"{url}/api/2.0/mlflow/{endpoint}"
    if query:
        address += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(address, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def search_runs(url: str, experiment_id: str) -> list[dict]:
    runs, token = [], None
    while True:
        body = {"experiment_ids": [experiment_id], "max_results": 1000}
        if token:
            body["page_token"] = token
        page = call(url, "runs/search", body)
        runs += page.get("runs", [])
        token = page.get("next_page_token")
        if not token:
            return runs


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def metrics(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def test_the_served_ui_shows_four_parent_runs_with_nested_trials(server, sweep):
    url, proc, started = server
    assert started, "expected the server to run workers of its own"
    with urllib.request.urlopen(url, timeout=30) as r:  # the UI's page
        assert r.status == 200
    experiment = call(url, "experiments/get-by-name", experiment_name=EXPERIMENT)["experiment"]
    runs = search_runs(url, experiment["experiment_id"])
    parents = [r for r in runs if "mlflow.parentRunId" not in tags(r)]
    assert sorted(tags(p)["strategy"] for p in parents) == sorted(STRATEGIES)
    for parent in parents:
        info, ptags, pmetrics = parent["info"], tags(parent), metrics(parent)
        assert info["status"] == "FINISHED"
        assert (ptags["model"], ptags["dataset"], ptags["task"]) == ("mlp3", "digits", "tune")
        assert ptags["sweep_dir"] == str((sweep / "multirun").resolve())
        job = ptags["job_num"]
        results = json.loads((sweep / "multirun" / job / "results.json").read_text())
        assert results["strategy"] == ptags["strategy"]
        assert pmetrics["best_val_accuracy"] == pytest.approx(results["best"]["val_accuracy"])
        assert pmetrics["wall_time_s"] > 0 and pmetrics["members"] >= 1
        assert "host_rss_mb" in pmetrics
        params = {p["key"]: p["value"] for p in parent["data"]["params"]}
        assert params["model.width"] == "64" and params["scheduler.R"] == "3"

        children = [r for r in runs if tags(r).get("mlflow.parentRunId") == info["run_id"]]
        trials = {t["trial_id"]: t for t in results["trials"]}
        assert sorted(c["info"]["run_name"] for c in children) == sorted(trials)
        for child in children:
            trial = trials[child["info"]["run_name"]]
            assert child["info"]["status"] == trial["status"].upper()
            ctags = tags(child)
            assert ctags["strategy"] == ptags["strategy"] and ctags["pack_id"]
            assert ("val_accuracy" in metrics(child)) == (trial["status"] != "failed")
            steps = call(url, "metrics/get-history", run_id=child["info"]["run_id"],
                         metric_key="val_loss").get("metrics", [])
            assert sorted(m["step"] for m in steps) == [round(r["epochs"]) for r in trial["rungs"]
                                                      if r["val_loss"] is not None]

        files = {f["path"] for f in call(url, "artifacts/list", run_id=info["run_id"],
                                         path="plots")["files"]}
        assert files == {"plots/timeline.png", "plots/best_so_far.png"}
        query = urllib.parse.urlencode({"path": "plots/timeline.png",
                                        "run_uuid": info["run_id"]})
        with urllib.request.urlopen(f"{url}/get-artifact?{query}", timeout=30) as r:
            assert r.read(8) == b"\x89PNG\r\n\x1a\n"
    assert proc.poll() is None


def test_one_failed_job_neither_stops_the_sweep_nor_leaves_a_run_open(tmp_path):
    """Job 0's budget fits no member: it fails after its MLflow run opened."""
    packexp("-m", "device.memory_budget_mb=0.001,4096", "experiment=quick", "strategy=knn",
            "tracking=mlflow",
            f"tracking.store_dir={tmp_path / 'store'}", f"hydra.sweep.dir={tmp_path / 'm'}")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    assert "RUNNING" not in {r.info.status for r in runs}
    assert (tmp_path / "m" / "1" / "results.json").exists()
    parents = {r.data.tags["job_num"]: r.info.status for r in runs
               if "mlflow.parentRunId" not in r.data.tags}
    assert parents == {"0": "FAILED", "1": "FINISHED"}
