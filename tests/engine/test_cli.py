"""python -m packexp as a user runs it: what it says run in this process
(``packexp.testing.command``), a search end to end in a subprocess. What needs a fresh
interpreter (the settings refused before TensorFlow loads, the interrupt handling's imports)
is the system layer's, tests/system/test_imports.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packexp.records.report import describe
from packexp.runner.journal import Journal
from packexp.testing.command import packexp, run_command


@pytest.mark.parametrize(
    ("override", "needle"),
    [("scheduler.eta=1", "scheduler.eta=1"), ("scheduler.R=0", "scheduler.R=0"),
     ("seed=abc", "seed='abc'"), ("search_space.params.batch_size=[]", "batch_size")],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, override, needle):
    out = run_command("tracking=none", override, f"hydra.run.dir={tmp_path}")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("packexp: error: ")
    assert needle in lines[0]
    assert not (tmp_path / "results.json").exists()


def test_unknown_strategy_names_the_choices(tmp_path):
    out = run_command("strategy=best_fit", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 2
    assert out.stderr == ("packexp: error: strategy=best_fit: no option best_fit in config "
                          "group strategy; its options are batch_size, cost, knn, none, "
                          "random\n")


@pytest.mark.slow
def test_default_run_end_to_end(tmp_path):
    """The default search (``strategy=cost``, calibrating on its first run), with the store,
    the kept calibration and the run directory in tmp_path."""
    out = packexp("seed=3", f"hydra.run.dir={tmp_path / 'run'}",
                  f"tracking.store_dir={tmp_path}",
                  f"strategy.calibration_dir={tmp_path / 'calibration'}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["seed"] == 3 and results["strategy"] == "cost"
    assert len(list((tmp_path / "calibration").glob("*.json"))) == 1
    assert all(p["predicted_s"] > 0 for p in results["packs"])
    assert "cost model:" in out.stdout
    assert len(results["trials"]) == 9 + 5 + 3
    assert results["best"]["val_accuracy"] > 0.5
    assert "Best configurations" in out.stdout
    assert f"run directory: {tmp_path / 'run'}" in out.stdout
    assert (tmp_path / "mlflow.db").exists()
    assert (tmp_path / "run" / ".hydra" / "config.yaml").exists()
    # Every phase of every pack is timed, and the summary says how much was training.
    for pack in results["packs"]:
        phases = [pack[k] for k in ("build_s", "trace_s", "train_s", "eval_s", "checkpoint_s",
                                    "probe_s")]
        assert min(phases) >= 0 and pack["train_s"] > 0
        assert sum(phases) <= pack["duration_s"] + pack["probe_s"] + 1e-3
    assert results["phases"]["train_s"] == pytest.approx(
        sum(p["train_s"] for p in results["packs"]), abs=1e-3)
    assert 0 < results["train_share"] < 1 and results["startup_s"] > 0
    assert "training " in out.stdout and "% of the search" in out.stdout
    # Start-up split by phase: the command's own phases, adding up to the whole.
    startup = results["startup"]
    assert {"python", "imports", "composition", "tensorflow", "data", "model", "tracker",
            "calibration", "planning"} <= set(startup)
    assert all(s >= 0 for s in startup.values())
    assert sum(startup.values()) == pytest.approx(results["startup_s"], abs=0.02)
    # Measured (a fresh store), within its phase (each rounded to the millisecond).
    assert results["calibration"]["source"] == "measured"
    assert startup["calibration"] + 0.002 >= results["calibration_s"] > 0
    assert f"to the first pack ({describe(startup)})" in " ".join(out.stdout.split())
    log = (tmp_path / "run" / "packexp.log").read_text()
    assert "Sharding callback duration" not in log + out.stderr  # TF's checkpoint chatter


@pytest.mark.slow
def test_multirun_sweeps_strategies(tmp_path):
    out = packexp("-m", "strategy=none,knn", "experiment=quick", "pack.fusion=off",
                  f"hydra.sweep.dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = [json.loads((tmp_path / str(i) / "results.json").read_text()) for i in (0, 1)]
    assert [r["strategy"] for r in runs] == ["none", "knn"]

    def scores(results):
        return [(t["trial_id"], [(r["rung"], r["val_accuracy"]) for r in t["rungs"]])
                for t in results["trials"]]

    assert scores(runs[0]) == scores(runs[1])
    # The first job's start-up has Python and TensorFlow starting; the second's is its own,
    # not the first job's whole run: its phases have none of the process's (checked by the
    # phases, not by comparing seconds, which a stalled worker can turn over).
    assert {"python", "imports", "tensorflow"} <= set(runs[0]["startup"])
    assert {"python", "imports"}.isdisjoint(runs[1]["startup"])  # the process's, not the job's
    for run in runs:
        assert sum(run["startup"].values()) == pytest.approx(run["startup_s"], abs=0.02)


def test_resume_of_a_directory_without_a_journal_exits_2(tmp_path):
    out = run_command("tracking=none", "resume=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 2
    assert "no journal here" in out.stderr


def refused(cwd: Path, *args: str) -> str:
    """The one line ``python -m packexp *args`` prints, run in ``cwd`` (in this process): exit
    code 2, nothing else on stderr, no traceback, and nothing written (not even an empty run
    directory)."""
    before = sorted(cwd.rglob("*"))
    done = run_command(*args, cwd=cwd)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("packexp: error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert sorted(cwd.rglob("*")) == before, "a refused run left files"
    return lines[0].removeprefix("packexp: error: ")


@pytest.mark.parametrize(("args", "starts"), [
    (["seed=-1"], "seed=-1: must be an integer from 0 to 4294967295"),
    (["seed=4294967296"], "seed=4294967296: must be an integer from 0 to 4294967295"),
    (["scheduler=asha", "scheduler.R=1"], "scheduler.R=1: ASHA with eta=3, min_r=1 never "
                                          "promotes"),
    (["scheduler.R=2"], "scheduler.R=2: Hyperband with eta=3 needs R >= 3"),
    (["scheduler=pbt", "scheduler.epochs=4", "scheduler.interval=4"],
     "scheduler.interval=4: with epochs=4 no interval ends before the last epoch"),
    (["scheduler=asha", "scheduler.min_r=1.5", "scheduler.R=2"],
     "scheduler.R=2: ASHA with eta=3, min_r=1.5 never promotes"),
    (["scheduler=asha", "scheduler.max_epochs=2"],
     "scheduler.max_epochs=2: affords 1 configurations"),
    (["resume=true", "hydra.run.dir=outputs/runs/typo"],
     "resume=true: outputs/runs/typo/journal.jsonl: no journal here"),
    (["preprocess.flip=maybe"], "preprocess.flip='maybe': must be true or false"),
    (["summary_top_k=abc"], "summary_top_k='abc': must be null or an integer >= 0"),
    (["device.gpu_memory_fraction=2"], "device.gpu_memory_fraction=2: must be a number in "
                                       "(0, 1]"),
], ids=["negative-seed", "seed-past-32-bits", "asha-R1", "hyperband-R2", "pbt-one-interval",
        "asha-min-r", "asha-max-epochs", "resume-typo", "flip", "summary-top-k",
        "gpu-fraction"])
def test_a_value_no_library_should_see_is_one_line_naming_its_key(tmp_path, args, starts):
    assert refused(tmp_path, *args, "tracking=none").startswith(starts)


@pytest.mark.tf  # the plan's job starts TensorFlow
def test_the_smallest_R_that_halves_is_named_and_works(tmp_path):
    line = refused(tmp_path, "scheduler=asha", "scheduler.R=2", "tracking=none")
    assert line.endswith("the smallest R that works is 3"), line
    plan = run_command("task=plan", "scheduler=asha", "scheduler.R=3", "tracking=none",
                       f"hydra.run.dir={tmp_path / 'plan'}", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert (tmp_path / "plan" / "plan.json").exists()


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
