"""packexp/app/typos.py: a key or an option misspelt on the command line is one line naming
the closest valid name, exit 2 (in this process: ``packexp.testing.command``)."""

from __future__ import annotations

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl

from packexp.app.typos import closest
from packexp.testing.command import run_command


@pytest.mark.parametrize(("args", "line"), [
    (["scheduler.r=9"], "scheduler.r=9: no key r in scheduler; did you mean scheduler.R=9?"),
    (["objective=regresion"], "objective=regresion: no option regresion in config group "
                              "objective; did you mean objective=regression?"),
    (["sed=3"], "sed=3: no key sed in the config; did you mean seed=3?"),
    (["schedular=asha"], "schedular=asha: no key schedular in the config; did you mean "
                         "scheduler=asha?"),
    (["+experiment=quik"], "+experiment=quik: no option quik in config group experiment; did "
                           "you mean experiment=quick?"),
    (["strategy=best_fit"], "strategy=best_fit: no option best_fit in config group strategy; "
                            "its options are batch_size, cost, knn, none, random"),
    (["scheduler.foo.bar=1"], "scheduler.foo.bar=1: no key foo in scheduler (its keys: "
                              "_target_, R, eta, continue_on_promotion, lr_horizon); "
                              "+scheduler.foo.bar=1 adds one"),
    # A sweep names the override as typed, every value.
    (["-m", "strategy=none,knnn"], "strategy=none,knnn: no option knnn in config group "
                                   "strategy; did you mean strategy=knn?"),
    (["-m", "scheduler.r=1,2"], "scheduler.r=1,2: no key r in scheduler; did you mean "
                                "scheduler.R=1,2?"),
    # --help and --cfg compose too.
    (["scheduler.r=9", "--help"], "scheduler.r=9: no key r in scheduler; did you mean "
                                  "scheduler.R=9?"),
    (["objective=regresion", "--cfg", "job"], "objective=regresion: no option regresion in "
                                              "config group objective; did you mean "
                                              "objective=regression?"),
])
def test_a_typo_is_one_line_naming_the_closest_and_exit_2(tmp_path, args, line):
    out = run_command(*args, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"packexp: error: {line}\n")
    if "-m" not in args:  # a sweep's multirun.yaml Hydra writes before it composes a job
        assert not list(tmp_path.iterdir())  # nothing written where the run would go


def test_other_composition_errors_stay_hydra_s(tmp_path):
    out = run_command("+seed=1", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("Could not append to config. An item is already at 'seed'.")


def test_hydra_s_loader_is_put_back(tmp_path):
    load = ConfigLoaderImpl.load_configuration
    run_command("scheduler.r=9", cwd=tmp_path)
    assert ConfigLoaderImpl.load_configuration is load


@pytest.mark.parametrize(("name", "candidates", "expected"), [
    ("r", ["_target_", "R", "eta"], "R"),  # case ignored
    ("regresion", ["accuracy", "loss", "pareto", "regression"], "regression"),
    ("best_fit", ["batch_size", "cost", "knn", "none", "random"], None),
    ("x", [], None),
])
def test_closest(name, candidates, expected):
    assert closest(name, candidates) == expected
