"""A search's MLflow parent run name (``Components.run_name``): what tells searches apart."""

from __future__ import annotations

import pytest

from packexp.config import instantiate
from packexp.config.components import Components, data_file
from packexp.testing.config import compose_config


def run_name(overrides: list[str]) -> str:
    cfg = compose_config(overrides)
    return Components(cfg, space=None, scheduler=instantiate(cfg.scheduler, "scheduler"),
                      strategy=None, sampler=None,
                      objective=instantiate(cfg.objective, "objective"), dataset=None,
                      build_model=None, max_members=1,
                      names={"strategy": "cost", "model": "mlp3",
                             "dataset": cfg.dataset._target_.split(".")[-2]}).run_name


def test_two_searches_of_other_data_and_objectives_have_distinct_names():
    regression = run_name(["objective=regression", "dataset=table",
                           "dataset.path=data/diabetes.csv", "dataset.target=y"])
    pareto = run_name(["objective=pareto", "dataset=table", "dataset.path=data/wine.csv",
                       "dataset.target=label"])
    assert regression == "cost-s0-mlp3-table-diabetes-mse-hyperband-R9"
    assert pareto == "cost-s0-mlp3-table-wine-accuracy+params-hyperband-R9"


@pytest.mark.parametrize(
    ("overrides", "name"),
    [([], "cost-s0-mlp3-digits-accuracy-hyperband-R9"),  # digits has no file
     (["objective=loss", "scheduler=asha", "seed=3"], "cost-s3-mlp3-digits-loss-asha-R9"),
     (["objective=regression", "objective.metric=val_r2", "objective.mode=max"],
      "cost-s0-mlp3-digits-r2-hyperband-R9"),
     (["dataset=image_folder", "dataset.path=data/flowers/"],
      "cost-s0-mlp3-image_folder-flowers-accuracy-hyperband-R9")],
    ids=["default", "loss_asha", "r2", "folder"])
def test_the_name_carries_the_objective_and_the_data_file(overrides, name):
    assert run_name(overrides) == name


@pytest.mark.parametrize(
    ("path", "word"),
    [("data/wine.csv", "wine"), ("data/flowers/", "flowers"), ("data/shards/*.parquet", "shards"),
     ("data/cifar-10-python.tar.gz", "cifar-10-python"), (None, None)])
def test_a_data_path_in_a_word(path, word):
    assert data_file(path) == word
