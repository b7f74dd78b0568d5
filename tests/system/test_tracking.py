"""MLflow tracking where a process is under test: the MLflow writer, the process that calls
MLflow for the search's tracker (the calls in order, the store's journal mode, its start-up
and failures, Ctrl-C and a killed tracker), and the dataset inputs' digest (importing MLflow
starts ``uname`` and ``git``). The in-process checks are tests/engine/test_tracking.py's."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import pytest

from packexp.records.record import PackRecord
from packexp.tracking import MlflowTracker, TrackingError, writer_process


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in
            sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))]


@pytest.fixture
def in_the_writer(tmp_path, monkeypatch):
    """Runs Python code as the MLflow writer processes the test starts begin: the writer,
    not the test's process, calls MLflow."""
    def patch(code: str) -> None:
        folder = tmp_path / "writer-site"
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(textwrap.dedent(code))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))
        writer_process.close_spare()  # a writer kept from an earlier test is not patched

    yield patch
    writer_process.close_spare()  # nor may a patched one serve a later test


@pytest.mark.process
def test_the_dataset_digest_is_its_content():
    import numpy as np

    from packexp.data import digits
    from packexp.tracking.mlflow_tracker import dataset_inputs

    def digests(data):
        return [i.dataset.digest for i in dataset_inputs(data)]

    a, b, other = digits.load(seed=1), digits.load(seed=1), digits.load(seed=2)
    assert digests(a) == digests(b)
    assert digests(a)[0] != digests(other)[0]  # another split
    y = a.y_train.copy()
    y[-1] = (y[-1] + 1) % 10  # one label, past any sample of rows
    changed = type(a)(a.name, a.x_train, y, a.x_val, a.y_val, a.num_classes)
    assert digests(changed)[0] != digests(a)[0]
    assert np.array_equal(changed.x_train, a.x_train)


@pytest.mark.process
def test_a_name_the_store_refuses_is_a_tracking_error_naming_the_key(tmp_path, in_the_writer):
    in_the_writer("""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        def refuse(self, name, **kwargs):
            raise MlflowException(f"Invalid experiment name: '{name}'")

        MlflowClient.create_experiment = refuse
    """)
    tracker = MlflowTracker(experiment="bad/name", store_dir=str(tmp_path))
    with pytest.raises(TrackingError, match=r"^tracking\.experiment='bad/name': MLflow rejects"):
        tracker.start("r", {}, {})


ROOT = Path(__file__).resolve().parents[2]


def tiny_dataset():
    import numpy as np

    from packexp.data import Dataset

    x, y = np.zeros((6, 2), np.float32), np.array([0, 1, 0, 1, 0, 1], np.int32)
    return Dataset("tiny", x[:4], y[:4], x[4:], y[4:], num_classes=2)


def runs_in(folder: Path) -> tuple:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return client, parent, {r.info.run_name: r for r in runs if r is not parent}


@pytest.mark.process
def test_the_calls_reach_the_store_in_order_and_end_waits_for_them(tmp_path):
    tracker = MlflowTracker(store_dir=str(tmp_path), sample_interval_s=None)
    tracker.start("order", {"seed": 0}, {"task": "tune"}, dataset=tiny_dataset())
    for rung in range(30):  # queued faster than the writer applies them: batches merge
        tracker.log_trial_rung("t0", {"lr": 0.1}, {"rung": rung, "pack_id": f"p{rung}"},
                               rung + 1, {"val_accuracy": rung / 100, "val_loss": None})
        tracker.log_pack(rung, PackRecord(f"p{rung}", 0, 0, 1.0, ["t0"], train_s=rung))
    tracker.end_trial("t0", "FINISHED")
    tracker.end_trial("t1", "KILLED")  # ended before its first rung: ended once it is logged
    tracker.log_trial_rung("t1", {"lr": 1.0}, {"rung": 0}, 1, {"val_accuracy": 0.5})
    tracker.log_metrics({"wall_time_s": 1.5})
    tracker.end()

    client, parent, trials = runs_in(tmp_path)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["wall_time_s"] == 1.5
    assert history(client, parent.info.run_id, "train_s") == [(i, i) for i in range(30)]
    t0, t1 = trials["t0"], trials["t1"]
    assert history(client, t0.info.run_id, "val_accuracy") == [
        (i + 1, pytest.approx(i / 100)) for i in range(30)]
    assert (t0.data.tags["rung"], t0.data.tags["pack_id"]) == ("29", "p29")  # the last call's
    assert (t0.info.status, t0.data.tags["outcome"]) == ("FINISHED", "completed")
    assert (t1.info.status, t1.data.tags["outcome"]) == ("KILLED", "cut")
    assert t0.data.params == {"lr": "0.1"} and "val_loss" not in t0.data.metrics
    assert [i.dataset.name for i in t0.inputs.dataset_inputs] == ["tiny", "tiny"]


def journal_mode(database: Path) -> str:
    with closing(sqlite3.connect(database)) as db:
        return db.execute("PRAGMA journal_mode").fetchone()[0]


@pytest.mark.process
def test_a_local_store_is_kept_in_wal_and_its_file_alone_holds_an_ended_run(tmp_path):
    tracker = MlflowTracker(store_dir=str(tmp_path / "store"), sample_interval_s=None)
    tracker.start("r", {"seed": 0}, {})
    tracker.log_trial_rung("t0", {"lr": 0.1}, {"rung": 0}, 1, {"val_accuracy": 0.5})
    tracker.end_trial("t0", "KILLED")
    tracker.end()
    database = tmp_path / "store" / "mlflow.db"
    assert journal_mode(database) == "wal"
    (tmp_path / "copy").mkdir()
    shutil.copy(database, tmp_path / "copy")  # without mlflow.db-wal: the run's end copied it in
    client, parent, trials = runs_in(tmp_path / "copy")
    assert parent.info.status == "FINISHED" and parent.data.params == {"seed": "0"}
    assert (trials["t0"].info.status, trials["t0"].data.tags["outcome"]) == ("KILLED", "cut")
    assert history(client, trials["t0"].info.run_id, "val_accuracy") == [(1, 0.5)]


@pytest.mark.process
def test_journal_mode_null_leaves_the_store_as_sqlite_makes_it(tmp_path):
    tracker = MlflowTracker(store_dir=str(tmp_path), sample_interval_s=None, journal_mode=None)
    tracker.start("r", {}, {})
    tracker.end()
    assert journal_mode(tmp_path / "mlflow.db") == "delete"


@pytest.mark.process
def test_the_writer_imports_mlflow_without_collecting_garbage_and_serves_collecting(
        tmp_path, in_the_writer):
    in_the_writer(f"""
        import gc
        from packexp.tracking import mlflow_writer

        start = mlflow_writer.MlflowWriter.start

        def noting_gc(self, spec):
            with open({str(tmp_path / "gc")!r}, "w") as f:
                f.write(f"{{gc.isenabled()}} {{gc.get_freeze_count()}}")
            return start(self, spec)

        mlflow_writer.MlflowWriter.start = noting_gc
    """)
    tracker = MlflowTracker(store_dir=str(tmp_path), sample_interval_s=None)
    tracker.start("r", {}, {})
    tracker.end()
    enabled, frozen = (tmp_path / "gc").read_text().split()
    # MLflow's modules, imported with collection off, are frozen: no collection scans them.
    assert enabled == "True" and int(frozen) > 100_000


@pytest.mark.process
def test_a_store_that_cannot_be_used_is_a_tracking_error_at_start(tmp_path):
    (tmp_path / "file").write_text("")
    tracker = MlflowTracker(store_dir=str(tmp_path / "file" / "store"))
    with pytest.raises(TrackingError, match=r"^tracking\.uri=sqlite:.*: cannot use the MLflow "):
        tracker.start("r", {}, {})
    assert tracker.run_id is None
    tracker.end("FAILED")  # nothing to end


@pytest.mark.process
def test_a_call_the_writer_cannot_apply_is_a_warning(tmp_path, in_the_writer, caplog):
    in_the_writer("""
        from mlflow.tracking import MlflowClient

        def refuse(self, *args, **kwargs):
            raise ConnectionError("server went away")

        MlflowClient.log_artifacts = refuse  # the packing plans, held, go as one folder
    """)
    caplog.set_level(logging.WARNING, logger="packexp.tracking")
    tracker = MlflowTracker(store_dir=str(tmp_path), sample_interval_s=None)
    tracker.start("r", {}, {})
    tracker.log_rung_plan(0, 0, 1.0, [])
    tracker.log_metrics({"best_val_accuracy": 0.5})
    tracker.end()
    assert "could not log the packing plan (server went away); the search goes on" in caplog.text
    assert "1 MLflow calls failed in this run" in caplog.text
    _, parent, _ = runs_in(tmp_path)
    assert parent.info.status == "FINISHED" and parent.data.metrics["best_val_accuracy"] == 0.5


@pytest.mark.process
def test_a_writer_that_dies_mid_search_is_one_warning_not_the_end(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="packexp.tracking")
    tracker = MlflowTracker(store_dir=str(tmp_path), sample_interval_s=None)
    tracker.start("r", {}, {})
    writer = tracker._writer
    os.kill(writer.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while writer.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    for i in range(3):
        tracker.log_pack(i, PackRecord(f"p{i}", 0, 0, 1.0, ["t0"]))
    tracker.end()
    gone = [r.getMessage() for r in caplog.records if "MLflow writer process ended" in
            r.getMessage()]
    assert len(gone) == 1 and "no later call reaches the store" in gone[0]
    assert "4 MLflow calls failed in this run" in caplog.text


@pytest.mark.process
def test_the_trackers_process_never_imports_mlflow(tmp_path):
    script = f"""
import sys
from packexp.tracking import MlflowTracker
tracker = MlflowTracker(store_dir={str(tmp_path)!r})
tracker.start("r", {{}}, {{}})
tracker.log_metrics({{"x": 1.0}})
tracker.end()
assert "mlflow" not in sys.modules, "the tracker's process imported MLflow"
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _, parent, _ = runs_in(tmp_path)
    assert parent.info.status == "FINISHED" and parent.data.metrics["x"] == 1.0


# Opens a run and two trial runs (one ended), queues 200 packs, says "ready" and waits.
# Ctrl-C raises KeyboardInterrupt whoever started the test: a process started in the
# background of a non-interactive shell (`make test &`) inherits SIGINT ignored, and then
# Python installs no handler (the test waited out its 120 s so, twice).
SEARCH_THEN_WAIT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from packexp.events import PackRecord
from packexp.tracking import MlflowTracker
tracker = MlflowTracker(store_dir=sys.argv[1], sample_interval_s=None)
tracker.start("r", {}, {})
for trial in ("t0", "t1"):
    tracker.log_trial_rung(trial, {}, {"rung": 0}, 1, {"val_accuracy": 0.5})
tracker.end_trial("t1", "FINISHED")
for i in range(200):
    tracker.log_pack(i, PackRecord(f"p{i}", 0, 0, 1.0, ["t0"], train_s=i))
try:
    print("ready", flush=True)
    time.sleep(120)
except KeyboardInterrupt:
    tracker.end("KILLED")
"""


def search_then(tmp_path, stop) -> int:
    """Runs ``SEARCH_THEN_WAIT`` in its own process group, ``stop(process)`` once it is
    ready; returns its exit code."""
    process = subprocess.Popen([sys.executable, "-c", SEARCH_THEN_WAIT, str(tmp_path)],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        assert process.stdout.readline() == "ready\n"
        stop(process)
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def ended(tmp_path, timeout: float = 120):
    """The store once its parent run is no longer RUNNING."""
    deadline = time.monotonic() + timeout
    while True:
        client, parent, trials = runs_in(tmp_path)
        if parent.info.status != "RUNNING" or time.monotonic() > deadline:
            return client, parent, trials
        time.sleep(0.2)


@pytest.mark.process
def test_ctrl_c_reaching_the_writer_too_loses_nothing(tmp_path):
    code = search_then(tmp_path, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert code == 0
    client, parent, trials = runs_in(tmp_path)  # the tracker's end waited for the writer
    assert parent.info.status == "KILLED"
    assert history(client, parent.info.run_id, "train_s") == [(i, i) for i in range(200)]
    assert (trials["t0"].info.status, trials["t0"].data.tags["outcome"]) == (
        "KILLED", "interrupted")
    assert (trials["t1"].info.status, trials["t1"].data.tags["outcome"]) == (
        "FINISHED", "completed")


@pytest.mark.process
def test_when_the_trackers_process_dies_the_writer_ends_its_runs_killed(tmp_path):
    code = search_then(tmp_path, lambda p: p.kill())
    assert code == -signal.SIGKILL
    client, parent, trials = ended(tmp_path)
    assert parent.info.status == "KILLED"
    assert history(client, parent.info.run_id, "train_s") == [(i, i) for i in range(200)]
    assert (trials["t0"].info.status, trials["t0"].data.tags["outcome"]) == (
        "KILLED", "interrupted")
    assert trials["t1"].info.status == "FINISHED"
