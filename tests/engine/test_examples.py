"""The worked examples under examples/, composed in-process and run as their READMEs say."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from packexp.config import check_pairing, component_name, instantiate, probe_model
from packexp.testing.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
OWN_MODEL = ROOT / "examples" / "own_model"
MODEL_HPARAMS = ("filters", "width", "dropout")


def readme_command(readme: Path) -> list[str]:
    """The first ``python -m packexp 'hydra.searchpath=...`` line of ``readme``."""
    lines = [line.strip() for line in readme.read_text().splitlines()]
    command = next(line for line in lines
                   if line.startswith("python -m packexp 'hydra.searchpath"))
    return shlex.split(command.split("#")[0])


def test_the_docs_and_the_readme_show_one_command():
    """docs/own-model.md and the example's README run the example alike."""
    command = readme_command(OWN_MODEL / "README.md")
    assert shlex.join(command) in (ROOT / "docs" / "own-model.md").read_text()
    assert "hydra.searchpath=[file://conf]" in command


def test_the_example_composes_through_the_searchpath():
    overrides = [o for o in readme_command(OWN_MODEL / "README.md")[3:]]
    overrides = [o.replace("file://conf", f"file://{OWN_MODEL / 'conf'}") for o in overrides]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    assert cfg.model._target_ == "my_models.cnn.build"
    assert set(MODEL_HPARAMS) <= set(cfg.search_space.params)
    assert cfg.dataset.images == "auto"  # packexp's own groups are still there


@pytest.fixture
def own_models(monkeypatch):
    """The example's package importable, and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(OWN_MODEL))
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "my_models"]:
        del sys.modules[name]


@pytest.mark.tf
def test_the_example_model_builds_for_every_value_of_its_hparams(own_models):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"hydra.searchpath=[file://{OWN_MODEL / 'conf'}]", "model=small_cnn",
            "search_space=small_cnn", "dataset.images=true"])
    build = instantiate(cfg.model, "model")
    dataset = instantiate(cfg.dataset, "dataset")
    space = instantiate(cfg.search_space, "search_space")
    check_pairing(cfg, build, dataset)
    probe_model(build, dataset, space)
    assert component_name(cfg, "model") == "cnn"  # outside a Hydra app: the module's name
    wide = build(dataset.input_shape, dataset.num_classes,
                 {"filters": 32, "width": 64, "dropout": 0.25})
    assert [type(layer).__name__ for layer in wide.layers][-2:] == ["Dropout", "Dense"]
    assert wide.layers[0].filters == 32


@pytest.mark.slow
def test_the_own_model_example_runs_as_its_readme_says(tmp_path):
    """From the example's folder, with the README's command line, plus a tmp run directory,
    no MLflow store and the calibration kept in tmp_path, so nothing is written under
    examples/. PYTHONPATH puts this checkout's packexp in place of the installed one."""
    command = readme_command(OWN_MODEL / "README.md")
    assert command[:3] == ["python", "-m", "packexp"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, *command[1:], "tracking=none",
                          f"hydra.run.dir={tmp_path / 'run'}",
                          f"strategy.calibration_dir={tmp_path / 'calibration'}"],
                         cwd=OWN_MODEL, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["model"] == "small_cnn" and results["dataset"] == "digits"
    assert len(results["trials"]) == 9 + 5 + 3
    for t in results["trials"]:
        assert set(MODEL_HPARAMS) <= set(t["hparams"])
    widths = {t["hparams"]["width"] for t in results["trials"]}
    assert len(widths) > 1 and widths <= {32, 64, 96, 128}
    rates = [t["hparams"]["learning_rate"] for t in results["trials"]]
    assert all(1e-3 <= r <= 3e-2 for r in rates) and len(set(rates)) == len(rates)
    assert {t["hparams"]["lr_schedule"] for t in results["trials"]} == {"constant", "rex"}
    assert results["best"]["val_accuracy"] > 0.8
    assert set(MODEL_HPARAMS) <= set(results["best"]["hparams"])
