"""The fault battery (docs/failures.md): each fault on a real search loses no finished
member's score, prints one line naming the cause and no traceback, and a resume ends as the
unbroken search does."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from packexp.testing.command import packexp
from packexp.testing.config import ROOT
from packexp.testing.processes import wait_until
from packexp.testing.searches import search, search_command

pytestmark = pytest.mark.slow

# Fused packs (experiment=quick trains plain ones): the end-to-end checks of killed and
# resumed runs cover the fused engine's journal, checkpoints and resume too, and the slower
# fused search leaves the signals time to land mid-run.
SEARCH = ["experiment=quick", "strategy=knn", "scheduler.R=9", "seed=5", "pack.fusion=auto"]


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0"}
    return subprocess.Popen([sys.executable, "-m", "packexp", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def journaled(run_dir: Path, event: str) -> int:
    journal = run_dir / "journal.jsonl"
    return journal.read_text().count(f'"event": "{event}"') if journal.exists() else 0


def scores(run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text())
    return {t["trial_id"]: (t["hparams"], t["status"],
                            [(r["rung"], r["val_accuracy"], r["train_loss"]) for r in t["rungs"]])
            for t in results["trials"]}


def results_per_rung(run_dir: Path) -> Counter:
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return Counter((r["trial_id"], r["rung"]) for r in map(json.loads, lines)
                   if r["event"] == "result")


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("packexp: error:")]


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> dict:
    """The scores of SEARCH run whole (in this process, as run(cfg))."""
    run_dir = tmp_path_factory.mktemp("whole") / "run"
    packs = search(run_dir, *SEARCH)["packs"]
    assert any(p["fused"] for p in packs)  # SEARCH's fused engine, as its comment says
    return scores(run_dir)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A run of SEARCH SIGKILLed once it has journaled four member results."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    proc = start(*SEARCH, f"hydra.run.dir={run_dir}")
    assert wait_until(lambda: journaled(run_dir, "result") >= 4 or proc.poll() is not None,
                      300)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.kill()
    proc.communicate()
    return run_dir


def copy_of(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def test_a_journal_cut_mid_line_resumes_and_retrains_only_what_the_cut_line_named(
        tmp_path, killed, unbroken, caplog):
    run_dir = copy_of(killed, tmp_path / "run")
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if b'"event": "result"' in line)
    cut = json.loads(lines[last])
    # kill -9 during the append of the last result: half its line written, no newline.
    journal.write_bytes(b"".join(lines[:last]) + lines[last][:len(lines[last]) // 2])
    before = Counter((r["trial_id"], r["rung"]) for r in map(json.loads, lines[:last])
                     if r["event"] == "result")

    search(run_dir, *SEARCH, "resume=true")  # in this process: an error would raise here
    assert "ignoring a half-written final line" in caplog.text
    assert scores(run_dir) == unbroken
    records = [json.loads(line) for line in journal.read_text().splitlines()]  # all whole
    after = [r for r in records[[r["event"] for r in records].index("resume"):]
             if r["event"] == "result"]
    # The cut line's pack trains again whole, as a pack is committed whole (its members'
    # earlier lines are superseded); no member of a pack committed before the kill does.
    retrained = {(r["trial_id"], r["rung"]) for r in after} & set(before)
    assert retrained == {k for k, pack in whole_lines(lines[:last]).items()
                         if pack == cut["pack_id"]}
    assert (cut["trial_id"], cut["rung"]) in {(r["trial_id"], r["rung"]) for r in after}
    assert Counter((r["trial_id"], r["rung"]) for r in after).most_common(1)[0][1] == 1


def whole_lines(lines: list[bytes]) -> dict[tuple[str, int], str]:
    """Each journaled result's pack, by trial and rung."""
    return {(r["trial_id"], r["rung"]): r["pack_id"] for r in map(json.loads, lines)
            if r["event"] == "result"}


def digest(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("override, key", [
    ("seed=6", "seed=6 here, but the journal has seed=5"),
    ("strategy=none", ": strategy."),
    ("scheduler=asha", ": scheduler."),
    ("dataset=mnist1d", ": dataset."),
])
def test_resume_with_another_key_is_one_line_naming_it_and_writes_nothing(killed, override, key):
    before = digest(killed)
    args = [*SEARCH, "resume=true", f"hydra.run.dir={killed}"]
    args = [a for a in args if a.split("=")[0] != override.split("=")[0]] + [override]
    refused = packexp(*args)
    assert refused.returncode == 2
    [line] = errors(refused.stderr)
    assert line.startswith("packexp: error: resume=true: ") and key in line, line
    assert "resume with the overrides the run started with" in line
    assert "Traceback" not in refused.stderr
    assert digest(killed) == before  # not even Hydra's .hydra files or the log


def writers_of(proc: subprocess.Popen) -> list:
    import psutil

    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if "tracking.writer_main" in " ".join(child.cmdline()):  # its entry point
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_the_mlflow_writer_killed_mid_search_loses_no_result_and_no_run_stays_running(
        tmp_path, unbroken):
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    proc = start(*SEARCH, "tracking=mlflow", f"tracking.store_dir={tmp_path}",
                 f"hydra.run.dir={run_dir}")
    assert wait_until(lambda: journaled(run_dir, "pack") >= 1 or proc.poll() is not None, 300)
    assert proc.poll() is None, "the run ended before its writer could be killed"
    [writer] = writers_of(proc)
    writer.kill()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert scores(run_dir) == unbroken
    warnings = [line for line in (out + err).splitlines() if "MLflow: could not" in line]
    assert len(warnings) == 1 and "writer process" in warnings[0], warnings
    assert "tracking was lost mid-search" in out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    statuses = Counter(r.info.status for r in runs)
    assert "RUNNING" not in statuses, statuses
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FAILED" and parent.data.tags["tracking"] == "lost"


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MB tmpfs: the place a run writes to, which the test can fill and free."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs",
                                            str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root (and a kernel that allows it)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Takes every free byte of ``disk``; returns the file that holds them."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_leaves_the_file_written_before_and_names_the_one_refused(small_disk):
    from packexp.files import write_json

    path = small_disk / "results.json"
    write_json(path, {"kept": True})
    filler = fill(small_disk)
    with pytest.raises(OSError, match=r"No space left on device") as refused:
        write_json(path, {"big": "x" * (1 << 20)})
    assert refused.value.filename == str(path)
    assert json.loads(path.read_text()) == {"kept": True}
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "results.json"]
    filler.unlink()


def test_a_disk_full_mid_search_is_one_line_naming_the_file_and_a_resume_ends_the_search(
        small_disk, unbroken):
    run_dir = small_disk / "run"
    proc = start(*SEARCH, f"hydra.run.dir={run_dir}")
    assert wait_until(lambda: journaled(run_dir, "pack") >= 1 or proc.poll() is not None, 300)
    assert proc.poll() is None, "the run ended before the disk could fill"
    filler = fill(small_disk)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    assert "Traceback" not in err and "Logging error" not in err
    [line] = errors(err)
    assert ": No space left on device; once that is fixed, resume with python -m packexp" in line
    assert str(run_dir) in line.split(": No space")[0]
    assert not (run_dir / "results.json").exists()

    filler.unlink()  # space is back
    argv = shlex.split(line.split("resume with python -m packexp ")[1])
    assert f"hydra.run.dir={run_dir}" in argv
    search_command(argv)  # the resume it names, in this process
    assert scores(run_dir) == unbroken
    assert set(results_per_rung(run_dir).values()) == {1}
    assert not [p for p in run_dir.rglob(".*.tmp")] and not list(run_dir.rglob(".*.json.*"))


def test_a_refused_fresh_run_in_a_run_directory_leaves_it_as_it_was(killed):
    before = digest(killed)
    refused = packexp(*SEARCH, f"hydra.run.dir={killed}")
    assert refused.returncode == 2
    [line] = errors(refused.stderr)
    assert "holds a journal already" in line
    assert digest(killed) == before
