"""packexp from Python: ``packexp.tune`` runs the command line's search in this process."""

from __future__ import annotations

import functools
import io
import json
import time

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from sklearn.datasets import load_digits

import packexp
from packexp import in_process
from packexp.api import literal, overrides_for
from packexp.events import Listener
from packexp.hyperband import Hyperband
from packexp.listeners import SearchProgress
from tests.helpers import packexp as run_cli

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking
# Scores compared exactly: plain packs, no XLA (README, "Isolation").
PLAIN = {"fusion": "off", "jit_compile": False}
SPACE = {"params": {"batch_size": [32, 64], "optimizer": ["adam", "sgd"],
                    "learning_rate": {"kind": "float", "low": 1.0e-3, "high": 1.0e-1,
                                      "log": True},
                    "activation": ["relu", "tanh"]},
         "categorical": ["optimizer", "activation"]}


def small_mlp(input_shape, num_classes, hparams, width=16):
    """A builder of the builder contract, defined in this module."""
    import keras

    inputs = keras.Input(input_shape)
    hidden = keras.layers.Dense(width, activation=hparams.get("activation", "relu"))(inputs)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))


class InterruptAfterFirstPack(Listener):
    """A listener that presses Ctrl-C once the search's first pack is journaled."""

    def __init__(self, run_dir):
        self.run_dir = run_dir

    def on_pack_finished(self, event):
        raise KeyboardInterrupt


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data, digits.target


def scores(result: packexp.SearchResult) -> list[tuple]:
    return [(r.trial_id, r.rung, r.epochs, r.steps, r.val_accuracy, r.val_loss, r.pack_id)
            for r in result.trials.itertuples()]


def trials_without_paths(results: dict) -> list[dict]:
    """``results.json``'s trials but their checkpoints' paths (they name the run dir)."""
    return [{**t, "rungs": [{k: v for k, v in r.items() if k != "checkpoint"}
                            for r in t["rungs"]]} for t in results["trials"]]


# Overrides from keywords.

@pytest.mark.parametrize("key, value, expected", [
    ("strategy", "knn", ["strategy=knn"]),
    ("seed", 3, ["seed=3"]),
    ("resume", True, ["resume=true"]),
    ("scheduler", {"R": 27, "eta": 3}, ["scheduler.R=27", "scheduler.eta=3"]),
    ("pack", {"fusion": "off", "jit_compile": False}, ["pack.fusion=off",
                                                        "pack.jit_compile=false"]),
    ("preprocess", {"mean": None, "std": [0.5, 0.25]},
     ["preprocess.mean=null", "preprocess.std=[0.5,0.25]"]),
    ("tracking", {"store_dir": "/tmp/a b/c'd"}, ["tracking.store_dir='/tmp/a b/c\\'d'"]),
    ("preprocess", {"mean": 1e-05}, ["preprocess.mean=1e-05"]),
])
def test_keywords_become_the_command_line_s_overrides(key, value, expected):
    assert overrides_for(key, value) == expected


def test_a_numpy_scalar_is_written_as_its_python_value():
    assert [literal(np.int64(4)), literal(np.float32(0.5)), literal(np.bool_(True))] == [
        "4", "0.5", "true"]


def test_a_builder_is_named_by_its_path_or_kept_under_a_name_its_code_gives():
    assert in_process.target(small_mlp) == "tests.test_api.small_mlp"

    def local(input_shape, num_classes, hparams):
        return small_mlp(input_shape, num_classes, hparams)

    name = in_process.target(local)
    assert name.startswith("packexp.in_process.local_") and in_process.is_in_process(name)
    assert in_process.target(local) == name  # the same code, the same name
    assert getattr(in_process, name.rsplit(".", 1)[1]) is local
    wide, narrow = (in_process.target(functools.partial(small_mlp, width=w)) for w in (64, 8))
    assert wide.startswith("packexp.in_process.small_mlp_") and wide != narrow
    with pytest.raises(AttributeError, match="no builder of that name"):
        _ = in_process.nothing_here


# Errors are exceptions of one line.

@pytest.mark.parametrize("kwargs, words", [
    ({"strategy": "nope"}, ["strategy/nope"]),
    ({"stratgy": "knn"}, ["stratgy"]),
    ({"model": 42}, ["model=42"]),
    ({"data": (np.zeros((4, 2)),)}, ["data", "tuple of 1"]),
    ({"search_space": {"params": {"batch_size": [32]}, "scale": 2}}, ["scale"]),
    ({"task": "plan"}, ["task='plan'", "python -m packexp"]),
    ({"model": small_mlp, "overrides": ["model.width=8"]}, ["model.width=8", "partial"]),
])
def test_bad_input_raises_a_config_error_of_one_line(tmp_path, kwargs, words):
    with pytest.raises(packexp.ConfigError) as raised:
        packexp.tune(run_dir=tmp_path / "run", **{**QUICK, **kwargs})
    message = str(raised.value)
    assert "\n" not in message
    for word in words:
        assert word in message
    assert not (tmp_path / "run" / "results.json").exists()
    assert not (tmp_path / "run" / "journal.jsonl").exists()


@pytest.mark.slow
def test_a_bad_value_reads_as_the_command_line_s_line(tmp_path):
    cli = run_cli("scheduler.R=0", f"hydra.run.dir={tmp_path / 'cli'}")
    assert cli.returncode == 2
    with pytest.raises(packexp.ConfigError) as raised:
        packexp.tune(scheduler={"R": 0}, run_dir=tmp_path / "api")
    assert cli.stderr.strip().splitlines()[-1] == f"packexp: error: {raised.value}"


@pytest.mark.parametrize("break_data, words", [
    (lambda x, y: (np.where(np.arange(x.size).reshape(x.shape) == 70, np.nan, x), y),
     ["x has nan at row 1, column 6"]),
    (lambda x, y: (x, np.zeros_like(y)), ["one class"]),
    (lambda x, y: (x, y[:-1]), ["1797", "1796"]),
])
def test_bad_arrays_raise_one_line_naming_them_and_write_no_results(tmp_path, break_data,
                                                                     words):
    with pytest.raises(packexp.ConfigError) as raised:
        packexp.tune(data=break_data(*digits_arrays()), **QUICK, run_dir=tmp_path / "run")
    message = str(raised.value)
    assert message.startswith("packexp.tune(data=...)") and "\n" not in message
    for word in words:
        assert word in message
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name != ".hydra"]


def test_load_of_a_run_that_did_not_finish_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        packexp.load(tmp_path)


# Searches.

@pytest.mark.tf
@pytest.mark.slow
def test_the_api_gives_the_command_line_s_trials_and_scores(tmp_path):
    cli = run_cli("experiment=quick", "strategy=knn", "seed=4", "pack.fusion=off",
                  "pack.jit_compile=false", f"hydra.run.dir={tmp_path / 'cli'}")
    assert cli.returncode == 0, cli.stderr
    result = packexp.tune(**QUICK, seed=4, pack=PLAIN, run_dir=tmp_path / "api")
    on_cli = packexp.load(tmp_path / "cli")
    assert trials_without_paths(result.results) == trials_without_paths(on_cli.results)
    assert scores(result) == scores(on_cli)
    assert result.best == on_cli.best
    assert [p["members"] for p in result.results["packs"]] == [
        p["members"] for p in on_cli.results["packs"]]
    config = (tmp_path / "api" / ".hydra" / "config.yaml").read_text()
    assert config == (tmp_path / "cli" / ".hydra" / "config.yaml").read_text()


@pytest.mark.tf
def test_the_result_holds_the_search_s_tables_and_reads_back(tmp_path):
    started = time.perf_counter()
    result = packexp.tune("mlp3", "digits", **QUICK, run_dir=tmp_path / "run")
    called = time.perf_counter() - started
    raw = json.loads((tmp_path / "run" / "results.json").read_text())
    assert result.run_dir == (tmp_path / "run").resolve()
    assert result.best == raw["best"] and result.best_val_accuracy > 0.5
    assert set(result.best) == {"trial_id", "hparams", "val_accuracy", "epochs"}
    # One row per trial and rung, each trial's hyper-parameters as columns.
    assert len(result.trials) == sum(len(t["rungs"]) for t in raw["trials"])
    assert {"trial_id", "rung", "epochs", "val_accuracy", "status", "batch_size",
            "optimizer", "learning_rate", "activation"} <= set(result.trials.columns)
    best_row = result.trials.loc[result.trials.val_accuracy.idxmax()]
    assert best_row.trial_id == result.best["trial_id"]
    assert best_row.val_accuracy == result.best["val_accuracy"]
    # One row per pack, with its phases.
    assert list(result.packs.pack_id) == [p["pack_id"] for p in raw["packs"]]
    assert {"size", "build_s", "trace_s", "train_s", "eval_s"} <= set(result.packs.columns)
    assert list(result.packs["size"]) == [len(p["members"]) for p in raw["packs"]]
    best = result.best_so_far()
    assert best.best.is_monotonic_increasing and best.seconds.is_monotonic_increasing
    assert best.best.iloc[-1] == result.best["val_accuracy"]
    assert result.plot().axes[0].get_ylabel() == "validation accuracy"
    assert result.mlflow_run_id is None  # experiment=quick tracks nothing
    # Start-up counts from the call, not from this (long-lived) process's start.
    assert 0 < result.results["startup_s"] < called

    again = packexp.load(tmp_path / "run")
    assert again.best == result.best and again.results == result.results
    pd.testing.assert_frame_equal(again.trials, result.trials)
    pd.testing.assert_frame_equal(again.packs, result.packs)


@pytest.mark.tf
def test_a_builder_and_a_space_from_python_train(tmp_path):
    result = packexp.tune(small_mlp, "digits", SPACE, **QUICK, run_dir=tmp_path / "run")
    config = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "_target_: tests.test_api.small_mlp" in config  # importable: named by its path
    assert result.results["model"] == "small_mlp"
    assert set(result.best["hparams"]) == set(SPACE["params"])
    assert result.trials.batch_size.isin([32, 64]).all()
    assert result.trials.learning_rate.between(1e-3, 1e-1).all()


@pytest.mark.tf
def test_a_builder_no_module_can_import_trains_here_and_not_on_ray(tmp_path):
    def local_mlp(input_shape, num_classes, hparams):
        return small_mlp(input_shape, num_classes, hparams, width=8)

    with pytest.raises(packexp.ConfigError, match="executor=ray"):
        packexp.tune(local_mlp, **QUICK, executor="ray", run_dir=tmp_path / "ray")
    assert not (tmp_path / "ray" / "journal.jsonl").exists()
    result = packexp.tune(local_mlp, **QUICK, run_dir=tmp_path / "run")
    config = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "_target_: packexp.in_process.local_mlp_" in config
    assert result.best["val_accuracy"] > 0


@pytest.mark.tf
def test_arrays_and_a_csv_of_the_same_data_give_the_same_scores(tmp_path):
    x, y = digits_arrays()
    table = pd.DataFrame(x, columns=[f"pixel{i}" for i in range(x.shape[1])])
    table["digit"] = y
    table.to_csv(tmp_path / "digits.csv", index=False)
    arrays = packexp.tune(data=(x, y), **QUICK, pack=PLAIN, run_dir=tmp_path / "arrays")
    csv = packexp.tune(data="table", **QUICK, pack=PLAIN, run_dir=tmp_path / "csv",
                       dataset={"path": str(tmp_path / "digits.csv"), "target": "digit"})
    assert scores(arrays) == scores(csv)
    assert arrays.best == csv.best
    with np.load(tmp_path / "arrays" / "data.npz") as kept:  # the run keeps its data
        assert np.array_equal(kept["x"], x) and np.array_equal(kept["y"], y)


@pytest.mark.tf
def test_given_validation_arrays_are_validated_on(tmp_path):
    x, y = digits_arrays()
    result = packexp.tune(data=(x[:1500], y[:1500], x[1500:], y[1500:]), **QUICK,
                          run_dir=tmp_path / "run")
    assert result.results["dataset"] == "arrays"
    accuracy = result.best["val_accuracy"] * 297  # 1797 - 1500 validation examples
    assert abs(accuracy - round(accuracy)) < 1e-6


@pytest.mark.tf
def test_an_interrupted_search_resumes_from_python_to_the_unbroken_one_s_scores(tmp_path):
    x, y = digits_arrays()
    settings = {**QUICK, "pack": PLAIN, "data": (x, y)}
    unbroken = packexp.tune(**settings, run_dir=tmp_path / "unbroken")
    stop = ["+listeners.stop._target_=tests.test_api.InterruptAfterFirstPack"]
    with pytest.raises(KeyboardInterrupt):
        packexp.tune(**settings, overrides=stop, run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "results.json").exists()
    with pytest.raises(packexp.ConfigError, match="data differs"):
        packexp.tune(**{**settings, "data": (x, (y + 1) % 10)}, resume=True,
                     run_dir=tmp_path / "run")
    resumed = packexp.tune(**settings, resume=True, run_dir=tmp_path / "run")
    assert resumed.results["resumed"] is True
    assert scores(resumed) == scores(unbroken)
    assert resumed.best == unbroken.best


@pytest.mark.tf
def test_the_search_is_tracked_in_the_same_mlflow_store(tmp_path):
    store = tmp_path / "store"
    result = packexp.tune(**QUICK, tracking="mlflow", overrides=[f"tracking.store_dir={store}"],
                          run_dir=tmp_path / "run")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{store / 'mlflow.db'}").get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["best_val_accuracy"] == result.best["val_accuracy"]


# Progress.

def test_progress_shows_in_a_terminal_and_a_notebook_and_nowhere_else():
    scheduler = Hyperband(R=3, eta=3)
    assert SearchProgress(scheduler, Console(force_terminal=True)).enabled
    assert SearchProgress(scheduler, Console(force_jupyter=True)).enabled
    assert not SearchProgress(scheduler, Console(file=io.StringIO())).enabled
