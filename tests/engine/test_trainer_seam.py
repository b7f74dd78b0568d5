"""The trainer seam through the config: a whole search on the fake trainer, and what it
refuses."""

from __future__ import annotations

import json

import pytest

from packexp.app.main import run
from packexp.errors import ConfigError
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer

pytestmark = pytest.mark.tf  # composing a Keras model's config imports Keras


def test_a_whole_search_runs_on_the_fake_trainer_and_hands_its_models_over(tmp_path):
    trainer = FakeTrainer(failing="")
    run(compose_config(["experiment=quick", "tracking=none"]), run_dir=tmp_path,
        trainer=trainer)
    results = json.loads((tmp_path / "results.json").read_text())
    trained = {i for call in trainer.calls for i in call["ids"]}
    assert {t["trial_id"] for t in results["trials"]} == trained
    assert results["capacity"]["max_members"] >= 2 and all(
        len(p["members"]) <= 2 for p in results["packs"])
    model = json.loads((tmp_path / results["best"]["model"]).read_text())
    assert model["trial_id"] == results["best"]["trial_id"]
    assert (tmp_path / "best_so_far.png").is_file()
    assert not [p for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()]  # none left


def test_a_strategy_that_weighs_measured_costs_is_refused_on_the_fake(tmp_path):
    with pytest.raises(ConfigError, match=r"^strategy=cost: weighs measured costs, which the "
                                          r"fake trainer does not measure$"):
        run(compose_config(["experiment=quick", "tracking=none"], strategy="cost"),
            run_dir=tmp_path, trainer=FakeTrainer())
    assert not (tmp_path / "results.json").exists()


def test_only_a_search_its_plan_or_a_refit_takes_a_trainer(tmp_path):
    with pytest.raises(ConfigError, match=r"task=profile: trains with TensorFlow's trainer only"):
        run(compose_config(["task=profile"]), run_dir=tmp_path, trainer=FakeTrainer())


def test_packexp_tune_takes_the_trainer_and_returns_the_search_it_drove(tmp_path):
    import packexp

    trainer = FakeTrainer(failing="")
    result = packexp.tune(overrides=["experiment=quick"], run_dir=tmp_path, strategy="knn",
                          tracking="none", trainer=trainer)
    assert result.best["trial_id"] in {i for call in trainer.calls for i in call["ids"]}
    assert result.to_json() == json.loads((tmp_path / "results.json").read_text())
