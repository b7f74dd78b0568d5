"""scripts/reproduce_paper.py's models: one experiment file each, and the commands it runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import CONF_DIR, compose_config

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reproduce_paper.py"
spec = importlib.util.spec_from_file_location("reproduce_paper", SCRIPT)
reproduce = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = reproduce  # dataclasses look their module up by name
spec.loader.exec_module(reproduce)

FILES = sorted(Path(CONF_DIR, "experiment").glob("paper_profile_*.yaml"))
MODELS = [p.stem.removeprefix("paper_profile_") for p in FILES]


def test_the_models_are_the_experiment_files_in_the_papers_order():
    order = {m: OmegaConf.load(p).paper.order for m, p in zip(MODELS, FILES, strict=True)}
    assert sorted(reproduce.SETUPS) == sorted(MODELS)
    assert list(reproduce.SETUPS) == sorted(MODELS, key=order.get)
    assert list(reproduce.SETUPS) == ["mlp3", "mobilenet", "resnet50", "densenet121"]


@pytest.mark.parametrize(("model", "path"), zip(MODELS, FILES, strict=True))
def test_a_setup_is_its_files_paper_key(model, path):
    paper = OmegaConf.load(path).paper
    setup = reproduce.SETUPS[model]
    assert setup.experiment == path.stem
    assert (setup.name, setup.label, setup.gpu_only) == (paper.name, paper.label, paper.gpu_only)
    assert list(setup.table2) == list(paper.table2)


def test_a_new_experiment_file_is_a_new_model(tmp_path, monkeypatch):
    for path in FILES:
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "paper_profile_tiny.yaml").write_text(
        "# @package _global_\npaper: {name: Tiny, order: 0, table2: [1, 2, 3], label: tiny,"
        " gpu_only: false, overrides: [profile.steps=1]}\n")
    monkeypatch.setattr(reproduce, "EXPERIMENTS", tmp_path)
    setups = reproduce.read_setups()
    assert list(setups) == ["tiny", *reproduce.SETUPS]
    assert setups["tiny"].profile_overrides("memory") == ("profile.steps=1",)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("profile", reproduce.PROFILES)
def test_every_experiment_composes_with_every_profile(model, profile):
    setup = reproduce.SETUPS[model]
    overrides = setup.profile_overrides(profile)
    # docs/RESULTS.md's "What ran" table lists exactly the profile.* overrides.
    assert all(o.startswith("profile.") for o in overrides)
    cfg = compose_config(["task=profile", f"profile={profile}", f"experiment={setup.experiment}",
                          *overrides])
    expected = OmegaConf.load(Path(CONF_DIR, "model", f"{model}.yaml"))
    assert cfg.model._target_ == expected._target_
    assert cfg.model.get("application") == expected.get("application")
    assert cfg.paper.label == setup.label


@pytest.mark.parametrize("model", MODELS)
def test_every_experiment_composes_alone(model):
    cfg = compose_config([f"experiment=paper_profile_{model}"])
    assert cfg.task == "tune"
    assert set(reproduce.SETUPS[model].per_profile) <= set(reproduce.PROFILES)


def test_mobilenet_runs_are_shorter_and_without_xla():
    setup = reproduce.SETUPS["mobilenet"]
    assert setup.profile_overrides("switch_overhead") == ("profile.xla=[false]",)
    assert setup.profile_overrides("num_models") == (
        "profile.xla=[false]", "profile.num_models=[1,2,4]", "profile.steps=10",
        "profile.warmup_steps=3", "profile.repeats=3")
    cfg = compose_config(["task=profile", "profile=num_models",
                          "experiment=paper_profile_mobilenet",
                          *setup.profile_overrides("num_models")])
    assert (cfg.model.alpha, cfg.dataset.train_size, cfg.dataset.val_size) == (0.35, 512, 64)
    assert (list(cfg.profile.xla), list(cfg.profile.num_models)) == ([False], [1, 2, 4])


def test_run_profile_runs_packexp_with_the_experiment(tmp_path, monkeypatch):
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback\nValueError: boom")

    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce, "OUT", tmp_path / "reproduce")
    monkeypatch.setattr(reproduce.subprocess, "run", fake_run)
    record = reproduce.run_profile("mobilenet", "memory", reproduce.SETUPS["mobilenet"])
    assert commands[0][1:3] == ["-m", "packexp"]
    assert commands[0][3:] == [
        "task=profile", "profile=memory", "experiment=paper_profile_mobilenet",
        "profile.xla=[false]", "profile.batch_sizes=[32,64,100]", "profile.steps=5",
        "profile.warmup_steps=2", "tracking.experiment=reproduce_paper",
        f"hydra.run.dir={tmp_path / 'reproduce' / 'mobilenet' / 'memory'}"]
    assert record["overrides"] == commands[0][3:-1]
    assert record["run_dir"] == "reproduce/mobilenet/memory"
    assert (record["returncode"], record["error"]) == (1, "Traceback\nValueError: boom")
