"""scripts/compare_strategies.py in a subprocess, on fake run directories and an MLflow store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_strategies.py"
STRATEGIES = ["none", "batch_size", "random", "knn"]
X = "\N{MULTIPLICATION SIGN}"

# (model, strategy) -> wall times of its runs; mlp3/knn has three runs: median 40, mean 55.
WALL = {
    ("mlp3", "none"): [100.0], ("mlp3", "batch_size"): [80.0], ("mlp3", "random"): [50.0],
    ("mlp3", "knn"): [40.0, 35.0, 90.0],
    ("mobilenet", "none"): [300.0], ("mobilenet", "batch_size"): [200.0],
    ("mobilenet", "random"): [250.0], ("mobilenet", "knn"): [100.0],
}
ACCURACY = {"mlp3": 0.9125, "mobilenet": 0.75}


def compare(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=120)


def table(stdout: str, title: str) -> dict[str, dict[str, str]]:
    """The rich table under ``title`` as {first cell: {column: cell}}."""
    return {next(iter(row.values())): row for row in table_rows(stdout, title)}


def table_rows(stdout: str, title: str) -> list[dict[str, str]]:
    """The rich table under ``title`` as a list of {column: cell}, in order."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    header: list[str] = []
    rows: list[dict[str, str]] = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("┃│").split("┃" if "┃" in line else "│")]
        if line.startswith("┃"):
            header = cells
        elif line.startswith("│"):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def write_results(folder: Path, model: str, strategy: str, wall: float,
                  accuracy: float | None, seed: int = 0, trials: list | None = None,
                  best_trial: str = "t0") -> None:
    folder.mkdir(parents=True)
    best = None if accuracy is None else {"trial_id": best_trial, "hparams": {},
                                          "val_accuracy": accuracy, "epochs": 9}
    (folder / "results.json").write_text(json.dumps(results_payload(
        model, strategy, wall, best, seed, trials or [])))


def results_payload(model: str, strategy: str, wall: float, best: dict | None, seed: int,
                    trials: list, dataset: str = "cifar10") -> dict:
    return {"strategy": strategy, "model": model, "dataset": dataset, "seed": seed, "R": 9,
            "eta": 3, "wall_time_s": wall, "trials": trials, "packs": [], "best": best}


def trials(*scores: list[float]) -> list[dict]:
    """Trial t<i> with one rung per score: ``trials([0.5, 0.9], [0.4])``."""
    return [{"trial_id": f"t{i}", "rungs": [{"rung": r, "val_accuracy": v}
                                           for r, v in enumerate(rungs)]}
            for i, rungs in enumerate(scores)]


@pytest.fixture
def run_dirs(tmp_path) -> list[Path]:
    """A multirun sweep folder plus a separate run folder, as a user's outputs look."""
    sweep, single = tmp_path / "multirun", tmp_path / "runs"
    job = 0
    for (model, strategy), walls in WALL.items():
        for seed, wall in enumerate(walls):
            accuracy = None if (model, strategy) == ("mobilenet", "random") else ACCURACY[model]
            folder = single / "extra" if wall == 90.0 else sweep / str(job)
            write_results(folder, model, strategy, wall, accuracy, seed)
            job += 1
    # The same run again among MLflow's artifacts must count once, or the median becomes 65.
    copy = sweep / "mlartifacts" / "1" / "abc" / "artifacts" / "results.json"
    copy.parent.mkdir(parents=True)
    shutil.copy(single / "extra" / "results.json", copy)
    return [sweep, single]


@pytest.mark.process
def test_runs_table_speedups_and_chart(tmp_path, run_dirs):
    out = compare("--runs", *map(str, run_dirs), "--out", str(tmp_path / "plots" / "t4.png"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("10 runs from results.json under")
    times = table(out.stdout, "Hyperband wall time (s) on cifar10")
    assert times["mlp3"] == {"model": "mlp3", "none": "100.0", "batch_size": "80.0",
                             "random": "50.0", "knn": "40.0*", "speedup": f"up to 2.5{X} (knn)"}
    assert times["mobilenet"]["knn"] == "100.0"
    assert times["mobilenet"]["speedup"] == f"up to 3.0{X} (knn)"
    speedups = table(out.stdout, "Speedup over none on cifar10")
    assert [speedups["mlp3"][s] for s in STRATEGIES] == [f"{v}{X}" for v in
                                                         ("1.00", "1.25", "2.00", "2.50")]
    assert [speedups["mobilenet"][s] for s in STRATEGIES] == [f"{v}{X}" for v in
                                                              ("1.00", "1.50", "1.20", "3.00")]
    accuracy = table(out.stdout, "Best validation accuracy on cifar10")
    assert accuracy["mlp3"]["knn"] == "0.9125" and accuracy["mobilenet"]["random"] == "null"
    assert "* median wall time of several runs: mlp3/knn 3 runs." in out.stdout
    png = tmp_path / "plots" / "t4.png"
    assert f"chart: {png}" in out.stdout
    assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.process
def test_runs_without_trials_are_not_compared_for_decisions(tmp_path, run_dirs):
    out = compare("--runs", *map(str, run_dirs), "--out", str(tmp_path / "c.png"))
    assert "Decisions not compared: no two strategies have runs of the same search" in out.stdout


@pytest.mark.process
def test_decisions_promotions_best_and_the_largest_drift(tmp_path):
    """knn drifts a little and decides alike; random promotes another trial and picks it."""
    runs = {
        "none": (trials([0.50, 0.900], [0.40], [0.30, None]), "t0"),
        "knn": (trials([0.50, 0.903], [0.41], [0.30, None]), "t0"),
        "random": (trials([0.50], [0.45, 0.95], [0.30]), "t1"),
    }
    for strategy, (recorded, best) in runs.items():
        write_results(tmp_path / "sweep" / strategy, "mlp3", strategy, 10.0, 0.9, seed=3,
                      trials=recorded, best_trial=best)
    # Another seed's search is never paired with these.
    write_results(tmp_path / "sweep" / "other", "mlp3", "knn", 10.0, 0.9, seed=4,
                  trials=trials([0.1, 0.2], [0.9]))
    out = compare("--runs", str(tmp_path / "sweep"), "--out", str(tmp_path / "c.png"))
    assert out.returncode == 0, out.stderr
    rows = table_rows(out.stdout, "Same decisions? (runs of the same seed, R and eta) on cifar10")
    assert [list(r.values()) for r in rows] == [
        ["mlp3", "random", "none", "1", "NO", "NO", "0.0500"],
        ["mlp3", "knn", "none", "1", "yes", "yes", "0.0100"]]


@pytest.mark.process
def test_mlflow_runs_are_compared_through_their_results_artifact(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("decisions",
                                          artifact_location=(tmp_path / "art").as_uri())
    for strategy, drifted in (("none", 0.9), ("knn", 0.925)):
        tags = {"strategy": strategy, "model": "mlp3", "dataset": "digits", "task": "tune"}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        client.log_metric(run_id, "wall_time_s", 5.0)
        best = {"trial_id": "t0", "val_accuracy": drifted, "epochs": 9}
        client.log_text(run_id, json.dumps(results_payload(
            "mlp3", strategy, 5.0, best, 0, trials([drifted]), "digits")), "results.json")
        client.set_terminated(run_id)
    out = compare("--mlflow", uri, "--experiment", "decisions", "--out", str(tmp_path / "c.png"))
    assert out.returncode == 0, out.stderr
    [row] = table_rows(out.stdout, "Same decisions? (runs of the same seed, R and eta)")
    assert list(row.values()) == ["mlp3", "knn", "none", "1", "yes", "yes", "0.0250"]


@pytest.mark.process
def test_default_chart_goes_to_the_working_directory(tmp_path, run_dirs):
    out = compare("--runs", str(run_dirs[0]), "--dataset", "cifar10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "strategy_comparison.png").read_bytes().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory) -> str:
    """Parent runs as MlflowTracker writes them, plus runs that must be ignored."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("table4")

    def parent(strategy: str, wall: float, status: str = "FINISHED", **extra: str) -> str:
        tags = {"strategy": strategy, "model": "mlp3", "dataset": "digits", "task": "tune",
                **extra}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        client.log_metric(run_id, "wall_time_s", wall)
        client.log_metric(run_id, "best_val_accuracy", 0.97)
        client.set_terminated(run_id, status=status)
        return run_id

    parent_id = parent("none", 100.0)
    for strategy, wall in [("batch_size", 80.0), ("random", 50.0), ("knn", 40.0)]:
        parent(strategy, wall)
    parent("knn", 1.0, status="FAILED")
    parent("knn", 2.0, **{"mlflow.parentRunId": parent_id})
    return uri


@pytest.mark.process
def test_mlflow_parent_runs_only(tmp_path, mlflow_store):
    out = compare("--mlflow", mlflow_store, "--experiment", "table4",
                  "--out", str(tmp_path / "c.png"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("4 runs from MLflow experiment 'table4'")
    times = table(out.stdout, "Hyperband wall time (s) on digits")
    assert times["mlp3"]["knn"] == "40.0" and times["mlp3"]["speedup"] == f"up to 2.5{X} (knn)"
    assert "median" not in out.stdout
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.process
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--runs", "{tmp}/nowhere"], "no such directory: {tmp}/nowhere"),
        (["--runs", "{tmp}/empty"], "no finished tune runs found: searched results.json under "
                                    "{tmp}/empty"),
        (["--mlflow", "{store}", "--experiment", "nope"],
         "--experiment nope: no such MLflow experiment"),
        (["--mlflow", "sqlite:///{tmp}/missing.db"], "no such MLflow store: {tmp}/missing.db"),
        (["--mlflow", "{store}", "--experiment", "table4", "--dataset", "cifar10"],
         "no finished tune runs found: searched dataset 'cifar10' in MLflow experiment"),
    ],
)
def test_errors_are_one_line_and_exit_2(tmp_path, mlflow_store, args, needle):
    (tmp_path / "empty").mkdir()
    fill = {"tmp": str(tmp_path), "store": mlflow_store}
    out = compare(*(a.format(**fill) for a in args), "--out", str(tmp_path / "c.png"))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("compare_strategies: error: ")
    assert needle.format(**fill) in lines[0]
    assert not (tmp_path / "c.png").exists()


@pytest.mark.slow
def test_sweep_end_to_end(tmp_path):
    """The script on the runs of a sweep over strategies, as ``-m strategy=none,knn`` lays them
    out (job 0 and 1; here run in this process: the script reads their results.json)."""
    from packexp.testing.searches import search

    for job, strategy in enumerate(("none", "knn")):
        search(tmp_path / "sweep" / str(job), f"strategy={strategy}", "experiment=quick")
    out = compare("--runs", str(tmp_path / "sweep"), "--out", str(tmp_path / "c.png"))
    assert out.returncode == 0, out.stderr
    row = table(out.stdout, "Hyperband wall time (s) on digits")["mlp3"]
    assert float(row["none"]) > 0 and float(row["knn"]) > 0
    assert row["speedup"].startswith("up to ") and row["speedup"].endswith(f"{X} (knn)")
    decided = table(out.stdout, "Same decisions? (runs of the same seed, R and eta) on digits")
    assert decided["mlp3"]["strategy"] == "knn" and decided["mlp3"]["against"] == "none"
    assert decided["mlp3"]["same promotions"] in ("yes", "NO")
    assert 0 <= float(decided["mlp3"]["largest score drift"]) < 0.5
