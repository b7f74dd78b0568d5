"""python -m packexp in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, packexp


@pytest.mark.process
def test_help_lists_the_groups():
    out = packexp("--help")
    assert out.returncode == 0, out.stderr
    for group in ("model", "dataset", "search_space", "strategy", "scheduler", "tracking",
                  "experiment"):
        assert f"{group}:" in out.stdout


@pytest.mark.process
@pytest.mark.parametrize(
    ("override", "needle"),
    [("scheduler.eta=1", "scheduler.eta=1"), ("scheduler.R=0", "scheduler.R=0"),
     ("seed=abc", "seed='abc'"), ("search_space.params.batch_size=[]", "batch_size")],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, override, needle):
    out = packexp("tracking=none", override, f"hydra.run.dir={tmp_path}")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("packexp: error: ")
    assert needle in lines[0]
    assert not (tmp_path / "results.json").exists()


CHECK_WITHOUT_TENSORFLOW = """
import sys
from packexp.errors import ConfigError
from packexp.run import check
from tests.helpers import compose_config

check(compose_config(["experiment=quick"]))  # a good config passes
try:
    check(compose_config(["experiment=quick", sys.argv[1]]))
except ConfigError as e:
    print(e)
print("tensorflow" in sys.modules)
"""


@pytest.mark.process
@pytest.mark.parametrize("override", ["scheduler.R=0", "pack.max_members=0",
                                      "search_space.params.optimizer=[sgdx]"])
def test_bad_search_settings_are_found_before_tensorflow_loads(override):
    out = subprocess.run([sys.executable, "-c", CHECK_WITHOUT_TENSORFLOW, override], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    message, loaded = out.stdout.strip().splitlines()
    assert message.startswith(override.split("=")[0])
    assert loaded == "False"


@pytest.mark.process
def test_unknown_strategy_names_the_choices(tmp_path):
    out = packexp("strategy=best_fit", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0
    assert "strategy/best_fit" in out.stderr
    assert "knn" in out.stderr


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
    # not the first job's whole run.
    first_job = runs[0]["startup_s"]
    assert first_job > runs[1]["startup_s"] >= 0
    assert runs[1]["startup_s"] < runs[0]["wall_time_s"]


@pytest.mark.slow
def test_resume_of_a_directory_without_a_journal_exits_2(tmp_path):
    out = packexp("tracking=none", "resume=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 2
    assert "no journal here" in out.stderr


@pytest.mark.slow
def test_a_cnn_search_on_the_embedded_default_learns(tmp_path):
    """MobileNetV2 on digits with no dataset key: images by default, and it learns.

    The space is cut to learning rates and optimizers that train in a few epochs, so the
    best is far above chance (0.10) unless BatchNorm's evaluation statistics lag behind
    training (Keras's momentum 0.999 scored 0.10 in every trial). The estimate alone plans
    the packs (device.probe=false): a probe would only confirm that they fit, in 10 s.
    """
    out = packexp("model=mobilenet", "strategy=knn", "experiment=quick", "scheduler.R=3",
                  "search_space.params.learning_rate=[0.001,0.01]",
                  "search_space.params.optimizer=[momentum,adam]", "device.probe=false",
                  f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["model"] == "mobilenet"
    scores = [r["val_accuracy"] for t in results["trials"] for r in t["rungs"]]
    assert len(scores) == 3 + 1 + 2
    assert results["best"]["val_accuracy"] >= 0.6
    assert sum(s > 0.3 for s in scores) >= 3  # not one lucky trial


@pytest.mark.slow
def test_a_search_over_ranges_end_to_end(tmp_path):
    """conf/search_space/ranges.yaml: an int range, choices and a log-uniform float range."""
    out = packexp("experiment=quick", "search_space=ranges", "strategy=knn", "tracking=none",
                  f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    trials = [t["hparams"] for t in results["trials"]]
    assert len(trials) == 3 + 2
    rates = [h["learning_rate"] for h in trials]
    assert all(isinstance(lr, float) and 1e-4 <= lr <= 1e-1 for lr in rates)
    assert len(set(rates)) == len(rates)  # drawn from a continuum, not a list
    assert all(h["batch_size"] in range(20, 71, 5) for h in trials)
    assert results["best"]["val_accuracy"] is not None
