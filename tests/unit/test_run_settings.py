"""The run's settings read once (``config/run.py``): typed from the composed config, each bad
value one line naming its key, and the tasks read them there, not with ``cfg.get``."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from packexp.config.run import RunSettings
from packexp.errors import ConfigError
from packexp.runner.budget import Budget
from packexp.testing.config import ROOT, compose_config


def test_the_composed_config_s_settings_are_typed_with_the_documented_defaults():
    run = RunSettings.of(compose_config([]))
    assert (run.task, run.seed, run.resume, run.keep_models, run.refit) == (
        "tune", 0, False, "best", False)
    assert run.refit_epochs is None and run.summary_top_k == 5 and run.probe_dir is None
    assert run.budget == Budget()
    given = RunSettings.of(compose_config([
        "seed=7", "keep_models=3", "refit=true", "refit_epochs=2", "summary_top_k=0",
        "+budget.time_s=60", "resume=true", "device.probe_dir=/tmp/probes"]))
    assert (given.seed, given.keep_models, given.refit, given.refit_epochs) == (7, 3, True, 2)
    assert (given.summary_top_k, given.resume, given.probe_dir) == (0, True, "/tmp/probes")
    assert given.budget == Budget(time_s=60)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("seed", -1, r"^seed=-1: must be an integer from 0 to 4294967295"),
    ("seed", True, r"^seed=True: must be an integer"),
    ("task", "train", r"^task='train': must be one of"),
    ("summary_top_k", -2, r"^summary_top_k=-2"),
    ("keep_models", 0, r"^keep_models=0: must be at least 1"),
    ("keep_models", "all", r"^keep_models='all': must be best, front, none"),
    ("refit", "yes", r"^refit='yes': must be true or false$"),
    ("refit_epochs", 0, r"^refit_epochs=0: must be a positive number of epochs"),
])
def test_a_bad_setting_is_one_line_naming_its_key(key, value, says):
    with pytest.raises(ConfigError, match=says) as e:
        RunSettings.of(OmegaConf.create({key: value}))
    assert "\n" not in str(e.value)


def test_the_settings_know_every_task_the_command_runs():
    from packexp.app.tasks import TASKS
    from packexp.config import run

    assert set(run.TASKS) == set(TASKS)


def test_the_tasks_read_the_settings_not_the_config_where_they_use_them():
    """``keep_models``, ``refit``, ``summary_top_k``, ``resume`` and the probe directory are
    read with ``cfg.get`` nowhere in the search's task: it takes them from ``RunSettings``."""
    source = (ROOT / "packexp" / "app" / "tasks" / "tune.py").read_text()
    pattern = r"cfg\.get\(\"(keep_models|refit|summary_top_k|resume)\"|probe_dir\"\)|cfg\.seed"
    assert not re.findall(pattern, source)
