"""packexp from Python: ``packexp.tune`` runs the command line's search in this process."""

from __future__ import annotations

import functools
import io
import json
import logging
import pickle
import random
import time

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf, open_dict
from rich.console import Console
from sklearn.datasets import load_digits

import packexp
from packexp.app import in_process
from packexp.app.given import literal, overrides_for
from packexp.events import Listener
from packexp.listeners import SearchProgress
from packexp.schedulers import Hyperband
from packexp.testing.command import packexp as run_cli
from packexp.testing.config import compose_config

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking
# Scores compared exactly: plain packs, no XLA (docs/isolation.md).
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
    ("strategy", "knn", ["strategy='knn'"]),
    ("tracking", {"experiment": "2024"}, ["tracking.experiment='2024'"]),
    ("seed", 3, ["seed=3"]),
    ("resume", True, ["resume=true"]),
    ("scheduler", {"R": 27, "eta": 3}, ["scheduler.R=27", "scheduler.eta=3"]),
    ("pack", {"fusion": "off", "jit_compile": False}, ["pack.fusion='off'",
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
    assert in_process.target(small_mlp) == "tests.engine.test_api.small_mlp"

    def local(input_shape, num_classes, hparams):
        return small_mlp(input_shape, num_classes, hparams)

    name = in_process.target(local)
    assert name.startswith("packexp.app.in_process.local_") and in_process.is_in_process(name)
    assert in_process.target(local) == name  # the same code, the same name
    assert getattr(in_process, name.rsplit(".", 1)[1]) is local
    wide, narrow = (in_process.target(functools.partial(small_mlp, width=w)) for w in (64, 8))
    assert wide.startswith("packexp.app.in_process.small_mlp_") and wide != narrow
    with pytest.raises(AttributeError, match="no builder of that name"):
        _ = in_process.nothing_here

    def make(width):
        def build(input_shape, num_classes, hparams):
            return small_mlp(input_shape, num_classes, hparams, width=width)
        return build

    assert in_process.target(make(16)) == in_process.target(make(16))
    assert in_process.target(make(16)) != in_process.target(make(512))  # what it closes over


# Errors are exceptions of one line.

@pytest.mark.parametrize("kwargs, words", [
    ({"strategy": "nope"}, ["strategy/nope"]),
    ({"stratgy": "knn"}, ["stratgy"]),
    ({"model": 42}, ["model=42"]),
    ({"data": (np.zeros((4, 2)),)}, ["data", "tuple of 1"]),
    ({"search_space": {"params": {"batch_size": [32]}, "scale": 2}}, ["scale"]),
    ({"task": "plan"}, ["task='plan'", "python -m packexp"]),
    ({"model": small_mlp, "overrides": ["model.width=8"]}, ["model.width=8", "partial"]),
    ({"search_space": SPACE, "overrides": ["search_space.categorical=[]"]},
     ["search_space.categorical=[]", "put them in the dict"]),
    ({"overrides": "strategy=knn"}, ["overrides='strategy=knn'", "a list"]),
    ({"resume": True, "run_dir": None}, ["resume=True", "run_dir="]),
    ({"data": ([[1.0, 2.0], [3.0]], [0, 1])}, ["packexp.tune(data=...)"]),
    ({"data": digits_arrays(), "seed": "abc"}, ["seed='abc'"]),
    ({"data": digits_arrays(), "dataset": {"val_fraction": 2}}, ["dataset.val_fraction=2"]),
])
def test_bad_input_raises_a_config_error_of_one_line(tmp_path, kwargs, words):
    with pytest.raises(packexp.ConfigError) as raised:
        packexp.tune(**{"run_dir": tmp_path / "run", **QUICK, **kwargs})
    message = str(raised.value)
    assert "\n" not in message
    for word in words:
        assert word in message
    written = {p.name for p in (tmp_path / "run").glob("*")} - {".hydra"}
    assert not written  # no results, no journal, no data


@pytest.mark.parametrize("earlier", ["journal.jsonl", "data.npz"])
def test_a_run_dir_that_holds_a_run_is_never_written_over(tmp_path, earlier):
    (tmp_path / earlier).write_bytes(b"the earlier run's")
    with pytest.raises(packexp.ConfigError, match="holds a run already; add resume=True"):
        packexp.tune(data=digits_arrays(), **QUICK, run_dir=tmp_path)
    assert (tmp_path / earlier).read_bytes() == b"the earlier run's"
    assert not (tmp_path / "data.npz").exists() or earlier == "data.npz"


def test_labels_from_pandas_are_kept_as_strings_without_pickling(tmp_path):
    from packexp.app.given import arrays_of

    x, y = digits_arrays()
    names = pd.Series(y).map(lambda d: f"digit {d}")
    for labels in (names, names.astype("category"), names.astype("string")):
        _, kept = arrays_of((pd.DataFrame(x), labels))
        assert kept.dtype.kind == "U" and kept[0] == f"digit {y[0]}"
        np.savez(tmp_path / "a.npz", y=kept)
        with np.load(tmp_path / "a.npz", allow_pickle=False) as f:
            assert np.array_equal(f["y"], kept)


def test_a_partial_of_an_importable_builder_puts_its_settings_in_the_config():
    from packexp.app.api import _hydra, compose
    from packexp.app.given import use_builder

    with _hydra():
        cfg = compose([])
    use_builder(cfg, functools.partial(small_mlp, width=8), [])
    assert dict(cfg.model) == {"width": 8, "_target_": "tests.engine.test_api.small_mlp",
                               "_partial_": True}
    assert cfg.hydra.runtime.choices.model == "small_mlp"


def test_load_says_what_a_directory_holds_instead_of_a_search(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        packexp.load(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="holds no search"):
        packexp.load(tmp_path)
    (tmp_path / "journal.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="running, was interrupted or failed"):
        packexp.load(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"profile": "num_models"}))
    with pytest.raises(ValueError, match="not a search's results"):
        packexp.load(tmp_path)


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
    # The same config: the memory probes (and calibrations) in packexp's home for both.
    api, cli = (OmegaConf.load(tmp_path / run / ".hydra" / "config.yaml") for run in ("api", "cli"))
    assert cli.device.probe_dir == str(packexp.app.api.home() / "probes")
    assert api == cli


@pytest.mark.tf
@pytest.mark.slow
def test_a_call_prints_nothing_unless_verbose_and_writes_only_in_packexp_s_home(
        tmp_path, monkeypatch, capfd):
    """A library call: no table, no progress, no outputs/ in the working directory; its run,
    and the cost strategy's calibration, under $PACKEXP_HOME."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("PACKEXP_HOME", str(tmp_path / "home"))
    capfd.readouterr()
    result = packexp.tune(experiment="quick", strategy="cost")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert list((tmp_path / "work").iterdir()) == []
    assert result.run_dir.parent == tmp_path / "home" / "runs"
    assert list((tmp_path / "home" / "calibration").glob("*.json"))
    assert isinstance(result.best["epochs"], int)  # 3, not 3.0

    packexp.tune(**QUICK, verbose=True, run_dir=tmp_path / "loud")
    out, _ = capfd.readouterr()
    assert "Best configurations (knn packing, mlp3 on digits, seed 0)" in out
    [summary] = [line for line in out.splitlines() if line.startswith("searched ")]
    assert summary.endswith(" evaluation programs")  # one line, however long, in a file


@pytest.mark.parametrize(("args", "expected"), [
    ([], {"tracking.store_dir": "HOME", "strategy.calibration_dir": "HOME/calibration"}),
    (["tracking.store_dir=mine", "strategy.calibration_dir=cal"],
     {"tracking.store_dir": "mine", "strategy.calibration_dir": "cal"}),
    (["dataset=mnist1d"], {"dataset.cache_dir": "HOME/data"}),
])
def test_a_call_keeps_what_the_command_line_writes_in_outputs_in_its_home(
        tmp_path, monkeypatch, args, expected):
    from packexp.app.api import compose, keep_in_home

    monkeypatch.setenv("PACKEXP_HOME", str(tmp_path))
    with packexp.app.api._hydra():
        cfg = compose(["tracking=mlflow", "strategy=cost", *args])
    with open_dict(cfg):
        keep_in_home(cfg, args)
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value.replace("HOME", str(tmp_path))


def test_a_run_directory_in_the_overrides_is_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKEXP_HOME", str(tmp_path / "home"))
    with pytest.raises(packexp.ConfigError, match=r"^scheduler\.R=0"):  # refused once placed
        packexp.tune(scheduler={"R": 0}, overrides=[f"hydra.run.dir={tmp_path / 'mine'}"])
    assert not (tmp_path / "home" / "runs").exists()


@pytest.mark.tf  # resolving the model's ${default:} imports Keras
def test_where_a_call_keeps_its_files_is_no_part_of_what_a_resume_compares():
    from packexp.app.session import comparable

    a = compose_config(["strategy=cost", "dataset=mnist1d"], strategy=None)
    b = a.copy()
    with open_dict(b):
        b.strategy.calibration_dir, b.dataset.cache_dir = "/home/u/packexp/calibration", "x"
    assert comparable(a) == comparable(b)


@pytest.mark.tf
def test_too_few_examples_for_the_batch_sizes_stop_before_the_journal(tmp_path):
    x, y = digits_arrays()
    with pytest.raises(packexp.ConfigError, match=r"^search_space\.params\.batch_size: 70 "
                       r"is more than the 40 training examples of dataset arrays"):
        packexp.tune(data=(x[:50], y[:50]), **QUICK, run_dir=tmp_path)
    assert not (tmp_path / "journal.jsonl").exists()


@pytest.mark.tf
def test_the_result_holds_the_search_s_tables_and_reads_back(tmp_path):
    logger = logging.getLogger("packexp")
    before = (logger.level, logger.propagate, list(logger.handlers),
              list(logging.getLogger().handlers))
    np.random.seed(5)
    random.seed(5)
    started = time.perf_counter()
    result = packexp.tune("mlp3", "digits", **QUICK, run_dir=tmp_path / "run")
    called = time.perf_counter() - started
    draws = (np.random.random(), random.random())
    np.random.seed(5)
    random.seed(5)
    assert draws == (np.random.random(), random.random())  # the caller's generators kept
    assert before == (logger.level, logger.propagate, list(logger.handlers),
                      list(logging.getLogger().handlers))
    assert "] - bracket " in (tmp_path / "run" / "packexp.log").read_text()
    assert result != packexp.load(tmp_path / "run")  # compared by identity, never raising
    assert pickle.loads(pickle.dumps(result.plot())).axes
    raw = json.loads((tmp_path / "run" / "results.json").read_text())
    assert result.run_dir == (tmp_path / "run").resolve()
    assert result.best == raw["best"] and result.best_val_accuracy > 0.5
    assert set(result.best) == {"trial_id", "hparams", "val_accuracy", "epochs", "metric", "value",
                                "model", "val_loss", "train_loss"}  # its rung's every metric
    assert result.best_value == result.best["val_accuracy"]
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
    # ... and none of the process's own start-up is in its phases.
    startup = result.results["startup"]
    assert {"python", "imports"}.isdisjoint(startup) and "composition" in startup
    assert sum(startup.values()) == pytest.approx(result.results["startup_s"], abs=0.02)

    again = packexp.load(tmp_path / "run")
    assert again.best == result.best and again.results == result.results
    pd.testing.assert_frame_equal(again.trials, result.trials)
    pd.testing.assert_frame_equal(again.packs, result.packs)


@pytest.mark.tf
def test_a_builder_and_a_space_from_python_train(tmp_path):
    result = packexp.tune(small_mlp, "digits", SPACE, **QUICK, run_dir=tmp_path / "run")
    config = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "_target_: tests.engine.test_api.small_mlp" in config  # importable: named by its path
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
    assert "_target_: packexp.app.in_process.local_mlp_" in config
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
    stop = ["+listeners.stop._target_=tests.engine.test_api.InterruptAfterFirstPack"]
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


@pytest.mark.tf  # composing mlp3's config imports Keras
def test_a_budget_that_ends_before_any_score_warns_a_call(tmp_path, capfd):
    """Not a silent best=None: the call's warning names the budget and the resume command."""
    from packexp.testing.fake_trainer import FakeTrainer

    result = packexp.tune(experiment="quick", strategy="knn", tracking="none",
                          budget={"trials": 1}, trainer=FakeTrainer(failing=""),
                          run_dir=tmp_path / "run")
    assert result.best is None and result.stopped.startswith("budget.trials=1: ")
    [line] = [ln for ln in capfd.readouterr().err.splitlines() if "budget" in ln]
    assert line.startswith("packexp: WARNING: the budget ended the search before any trial "
                           "was scored (budget.trials=1: ")
    assert f"resume=true hydra.run.dir={tmp_path / 'run'}" in line
