"""Refit (scikit-learn's ``refit``): a finished search's best configuration trained again
from scratch, with its seed, on the training and validation rows together."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf
from sklearn.datasets import load_digits

import packexp
from packexp.app.main import RunDirCheck, check_run_settings
from packexp.app.tasks.refit import merged, refittable, trial_seed
from packexp.errors import ConfigError
from packexp.records.best import Best
from packexp.runner.journal import Journal
from packexp.space import SearchSpace
from packexp.testing.config import compose_config

QUICK = {"experiment": "quick", "strategy": "knn"}  # R=3, no tracking, plain packs, no XLA
BEST = {"trial_id": "b1-t001", "hparams": {"batch_size": 30}, "epochs": 3}


def finished_run(run_dir, best=BEST, events=("start", "finished")):
    """A run directory as a search leaves it: a journal of ``events`` and results.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir)
    for event in events:
        journal.append(event, **({"config": {}} if event == "start" else {}))
    (run_dir / "results.json").write_text(json.dumps({"trials": [], "packs": [], "best": best}))
    return run_dir


def weights(path) -> list[np.ndarray]:
    import keras

    return keras.saving.load_model(path).get_weights()


# Which run can be refit: one line each, before TensorFlow loads.

def test_a_missing_or_unfinished_run_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^hydra\.run\.dir=.*missing: no such directory"):
        packexp.refit(tmp_path / "missing")
    running = tmp_path / "running"
    running.mkdir()
    Journal(running).append("start", config={})
    with pytest.raises(ConfigError, match=r"has no results\.json.*resume it with resume=true"):
        packexp.refit(running)
    with pytest.raises(ConfigError, match="its search was resumed and has not finished"):
        refittable(finished_run(tmp_path / "resumed", events=("start", "finished", "resume")))
    stopped = finished_run(tmp_path / "stopped", events=("start", "stopped"))
    assert refittable(stopped) == Best.from_dict(BEST) == BEST | {
        "val_accuracy": None, "metric": "val_accuracy", "value": None}


def test_a_run_without_a_best_or_whose_best_is_a_schedule_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="scored no trial, so it has no best configuration"):
        packexp.refit(finished_run(tmp_path / "none", best=None))
    assert refittable(tmp_path / "none", strict=False) is None  # refit=true: said, not refused
    schedule = [{"from": 0.0, "to": 3.0, "trial_id": "b0-t002", "hparams": {}},
                {"from": 3.0, "to": 6.0, "trial_id": "b0-t001", "hparams": {}}]
    with pytest.raises(ConfigError, match=r"b0-t001, trained on weights copied .*2 stretches"):
        packexp.refit(finished_run(tmp_path / "pbt", best={**BEST, "trial_id": "b0-t001",
                                                           "schedule": schedule}))
    # A member no exploit touched trained one configuration: it can be refit.
    assert refittable(finished_run(tmp_path / "own", best={**BEST, "schedule": schedule[:1]}))
    with pytest.raises(ConfigError, match=r"has no \.hydra/config\.yaml"):
        packexp.refit(tmp_path / "own")


@pytest.mark.parametrize(("overrides", "match"), [
    (["refit=yes"], r"^refit='yes': must be true or false$"),
    (["refit_epochs=0"], r"^refit_epochs=0: must be a positive number of epochs"),
    (["refit_epochs=abc"], r"^refit_epochs='abc': must be a positive number"),
    (["refit=true", "scheduler=pbt"], r"^refit=true: .*\(scheduler=pbt\)"),
    (["refit=true", "dataset=table", "dataset.cache=none"], r"^dataset\.cache=none: refit"),
])
def test_bad_refit_settings_are_refused_in_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match):
        check_run_settings(compose_config(overrides))


def test_a_streamed_dataset_is_refused_naming_its_key():
    cfg = OmegaConf.create({"dataset": {"cache": "auto"}})
    with pytest.raises(ConfigError, match=r"^dataset\.cache=auto: the run's data streams"):
        merged(SimpleNamespace(streams=True), cfg)


def test_the_seed_is_the_one_the_search_drew_the_trial_with():
    space = SearchSpace({"batch_size": [20, 40], "learning_rate": [0.1, 0.01]})
    drawn = space.sample(3, seed=7, bracket=2)
    assert [trial_seed([], 7, t.trial_id) for t in drawn] == [t.seed for t in drawn]
    # An asynchronous scheduler's draws are journaled with their seeds (ASHA's t0003).
    plan = {"event": "plan", "sampled": [{"trial_id": "t0003", "hparams": {}, "seed": 99}]}
    assert trial_seed([{"event": "start"}, plan], 7, "t0003") == 99
    with pytest.raises(ConfigError, match="cannot tell the seed t0004"):
        trial_seed([plan], 7, "t0004")


def test_task_refit_is_refused_before_hydra_writes(tmp_path, capsys):
    from packexp.app.api import _hydra, compose

    def start(*args):
        with _hydra():
            config = compose(["task=refit", *args])
        RunDirCheck().on_run_start(config)
        return config

    for args, line in [([], "task=refit: give hydra.run.dir="),
                       ([f"hydra.run.dir={tmp_path / 'missing'}"], "no such directory"),
                       ([f"hydra.run.dir={finished_run(tmp_path / 'run')}", "seed=3"],
                        "seed=3: task=refit trains the run's best configuration with the "
                        "run's own config; it takes refit_epochs only")]:
        with pytest.raises(SystemExit) as exited:
            start(*args)
        assert exited.value.code == 2
        assert line in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
    # A run that can be refit: Hydra is told not to write its .hydra files over the run's.
    config = start(f"hydra.run.dir={tmp_path / 'run'}", "refit_epochs=2")
    assert config.hydra.output_subdir is None


def test_a_tracked_run_s_refit_is_logged_on_its_mlflow_run(tmp_path, monkeypatch):
    """The search's journaled MLflow run, at the store its config names (a relative store
    where the search started), gets the refit as refit_model."""
    from packexp.app.tasks.refit import log_refit
    from packexp.data import Dataset, Scaling

    run_dir = finished_run(tmp_path / "run")
    Journal(run_dir).append("tracking", run_id="abc123")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    cwd: {tmp_path / 'started'}\n")
    cfg = OmegaConf.create({"tracking": {"_target_": "packexp.tracking.MlflowTracker",
                                         "store_dir": "outputs", "register_as": "digits"}})
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    dataset = Dataset("rows", rows, np.zeros(6, np.int32), rows, np.zeros(6, np.int32), 3,
                      inputs=Scaling(np.ones(2, np.float32), np.full(2, 2, np.float32)))
    calls = []
    monkeypatch.setattr("packexp.tracking.models.log_model_file",
                        lambda *args, **kwargs: calls.append((args, kwargs)) or {"uri": "u"})
    record = {"file": "models/refit.keras", "trial_id": "b1-t001", "epochs": 3, "seed": 5,
              "train_rows": 12}
    assert log_refit(cfg, run_dir, record, dataset) == {"uri": "u"}
    [(args, kwargs)] = calls
    uri, run_id, file, name, example, register_as = args
    assert (uri, run_id, file, name, register_as) == (
        f"sqlite:///{tmp_path / 'started' / 'outputs' / 'mlflow.db'}", "abc123",
        run_dir / "models" / "refit.keras", "refit_model", "digits")
    np.testing.assert_array_equal(example, rows[:5] * 2 + 1)  # the rows as the user gave them
    assert kwargs["outputs"] == (3,)
    assert kwargs["tags"] == {"refit": True, **record}
    untracked = finished_run(tmp_path / "untracked")  # its journal names no MLflow run
    assert log_refit(cfg, untracked, record, dataset) is None
    assert len(calls) == 1


# Refits of a search.

@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> SimpleNamespace:
    """A search of the digits given as raw arrays, refit as it finished (refit=true): its
    ``result``, and the refit's record and weights then (a test may refit again)."""
    digits = load_digits()
    result = packexp.tune(data=(digits.data, digits.target), **QUICK, refit=True,
                          run_dir=tmp_path_factory.mktemp("refit") / "run")
    record = json.loads((result.run_dir / "results.json").read_text())["refit"]
    return SimpleNamespace(result=result, record=record,
                           weights=weights(result.run_dir / record["file"]))


@pytest.mark.tf
@pytest.mark.search
def test_refit_true_keeps_the_best_trained_on_every_row_for_its_epochs(searched):
    import keras

    result, record = searched.result, searched.record
    best = result.best
    journal = Journal(result.run_dir).read()
    assert record == {**record, "file": "models/refit.keras", "trial_id": best["trial_id"],
                      "hparams": best["hparams"], "epochs": best["epochs"],
                      "seed": trial_seed(journal, 0, best["trial_id"]),
                      "train_rows": 1797}  # training (1437) and validation (360) rows
    assert record["train_loss"] > 0
    model = keras.saving.load_model(result.run_dir / record["file"])
    digits = load_digits()
    probabilities = model.predict(digits.data, verbose=0)  # the rows as they were given
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)
    assert (probabilities.argmax(axis=1) == digits.target).mean() > 0.8
    # Its standardisation is the search's: the training split's statistics.
    kept = keras.saving.load_model(result.run_dir / best["model"])
    assert all(np.array_equal(a, b) for a, b in zip(
        model.get_layer("standardize").get_weights(),
        kept.get_layer("standardize").get_weights(), strict=True))


@pytest.mark.tf
@pytest.mark.search
def test_a_refit_is_reproducible_bit_for_bit(searched):
    """packexp.refit in this process, later, trains what refit=true trained at the search's
    end: the same seed, rows and program."""
    import keras

    model = packexp.refit(searched.result.run_dir)  # the model; its file stays recorded
    assert isinstance(model, keras.Model)
    refit = packexp.load(searched.result.run_dir).facts.refit
    assert refit["file"] == "models/refit.keras"
    again = weights(searched.result.run_dir / refit["file"])
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), again, strict=True))
    digits = load_digits()
    np.testing.assert_array_equal(model.predict(digits.data, verbose=0), keras.saving.load_model(
        searched.result.run_dir / refit["file"]).predict(digits.data, verbose=0))
    assert len(again) == len(searched.weights) > 0
    assert all(np.array_equal(a, b) for a, b in zip(searched.weights, again, strict=True))


@pytest.mark.tf
@pytest.mark.search
def test_task_refit_trains_refit_epochs_with_the_run_s_own_config(searched):
    from packexp.app.main import run

    run_dir = searched.result.run_dir
    loss = run(compose_config(["task=refit", "refit_epochs=1"]), run_dir=run_dir)
    record = json.loads((run_dir / "results.json").read_text())["refit"]
    assert (record["epochs"], record["train_rows"], record["train_loss"]) == (1, 1797, loss)
    assert record["seed"] == searched.record["seed"]
    assert packexp.load(run_dir).best == searched.result.best  # the search's record stands


@pytest.mark.tf
@pytest.mark.search
def test_the_refit_s_train_loss_is_its_last_epoch_s_mean(searched):
    """results.json's refit.train_loss: the mean of the losses of its last epoch's steps,
    replayed step by step (the same trial, seed, rows and program), not its last step's
    nor its whole run's."""
    from packexp.app.tasks.refit import run_config
    from packexp.config.components import Components
    from packexp.packing.pack import Pack
    from packexp.space import Trial
    from packexp.space.options import PackSettings

    run_dir, record = searched.result.run_dir, searched.record
    cfg = run_config(run_dir)
    parts = Components.build(cfg, probe=False)
    cache = parts.pack_cache(merged(parts.dataset, cfg))
    member = cache.make_member(Trial(record["trial_id"], record["hparams"], (),
                                     seed=record["seed"]))
    member.set_lr_horizon(record["epochs"])
    pack = Pack([member], cache.data, PackSettings.from_config(
        {**cache.pack_options, "chunk_steps": 1}), cache.pack_options.get("batch_bucket"))
    losses = []
    for _ in range(member.steps_for(record["epochs"])):
        pack.train({member.trial_id: 1})
        losses.append(member.train_loss)
    last = losses[member.steps_for(record["epochs"] - 1):]
    assert len(last) == member.steps_per_epoch  # the digits' 1797 rows: one epoch's steps
    assert record["train_loss"] == pytest.approx(float(np.mean(last)), rel=1e-5)
    assert record["train_loss"] != pytest.approx(losses[-1], rel=1e-3)
    assert record["train_loss"] != pytest.approx(float(np.mean(losses)), rel=1e-3)


@pytest.mark.parametrize(("epochs", "batch_size", "rows", "stretches"), [
    (3.0, 32, 1000, [2.0, 3.0]),  # the last epoch on its own, its mean loss the one reported
    (1.0, 32, 1000, [1.0]),  # one epoch is the last
    (0.5, 32, 1000, [0.5]),
    (2.0, 64, 40, [2.0]),  # fewer rows than a batch: the last epoch adds no step of its own
])
def test_a_refit_trains_its_last_epoch_as_a_stretch_of_its_own_where_it_has_steps(
        epochs, batch_size, rows, stretches):
    from packexp.app.tasks.refit import _stretches

    assert _stretches(epochs, batch_size, rows) == stretches
