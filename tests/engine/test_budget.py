"""Budgets (``budget.time_s``, ``budget.trials``): a search stops at a pack boundary, says why,
and a resume with a larger budget ends as an unbroken run with that budget."""

from __future__ import annotations

import json
import shlex

import pytest

from packexp.config import check_search
from packexp.errors import ConfigError
from packexp.runner.budget import Budget
from packexp.runner.journal import Journal
from packexp.runner.study import earlier_s, load
from packexp.testing.command import run_command
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import HYPERBAND, fake_search, outcome
from packexp.testing.searches import search_on_fake


@pytest.mark.parametrize(("override", "line"), [
    ("budget.time_s=-1", r"^budget\.time_s=-1: must be null or a number of seconds > 0$"),
    ("budget.trials=0", r"^budget\.trials=0: must be null or an integer >= 1$"),
    ("budget.trials=2.5", r"^budget\.trials=2\.5: must be null or an integer >= 1$"),
])
def test_a_bad_budget_is_one_line_naming_the_key(override, line):
    with pytest.raises(ConfigError, match=line):
        check_search(compose_config([override]))


def test_the_budget_says_why_it_stops():
    assert Budget().out_of_time(1e9) is None and Budget().refuses_draw(10**6, 10) is None
    assert Budget(time_s=60).out_of_time(59.9) is None
    assert Budget(time_s=60).out_of_time(61.25) == "budget.time_s=60: 61.2 s searched"
    assert Budget(trials=12).refuses_draw(9, 3) is None
    assert Budget(trials=12).refuses_draw(9, 5) == (
        "budget.trials=12: 9 configurations drawn, the next plan draws 5")


def resumed(run_dir, fake_trainer, budget: Budget):
    search = fake_search(run_dir, fake_trainer, budget=budget)  # its journal replayed
    search.run(HYPERBAND)
    return search


def test_a_trials_budget_draws_no_plan_beyond_it_and_a_resume_goes_on(tmp_path, fake_trainer):
    """R=9 draws 9, 5 and 3 configurations by bracket: a budget of 12 stops before the second
    bracket, with the first trained to its end; a resume with 17 ends as an unbroken run."""
    whole = fake_search(tmp_path / "whole", fake_trainer, budget=Budget(trials=17))
    whole.run(HYPERBAND)
    assert whole.stopped is None and len(whole.trials) == 17
    stopped = fake_search(tmp_path / "cut", fake_trainer, budget=Budget(trials=12))
    stopped.run(HYPERBAND)
    assert stopped.stopped == "budget.trials=12: 9 configurations drawn, the next plan draws 5"
    assert len(stopped.trials) == 9
    assert {t.rungs[-1].epochs for t in stopped.trials.values()
            if t.status == "finished"} == {9.0}  # the first bracket ran to its end
    again = resumed(tmp_path / "cut", fake_trainer, Budget(trials=17))
    assert again.stopped is None
    again.finish()
    whole.finish()
    assert outcome(again) == outcome(whole)


def test_a_time_budget_starts_nothing_new_and_a_resume_goes_on(tmp_path, fake_trainer):
    whole = fake_search(tmp_path / "whole", fake_trainer)
    whole.run(HYPERBAND)
    whole.finish()
    spent = fake_search(tmp_path / "cut", fake_trainer, budget=Budget(time_s=60))
    # an earlier session searched the whole budget (the study's journal says so)
    spent.study.earlier_s = earlier_s([{"event": "start"}, {"event": "pack", "elapsed_s": 60.0},
                                       {"event": "resume"}])
    spent.run(HYPERBAND)
    assert spent.stopped.startswith("budget.time_s=60: 60.") and not spent.trials
    again = resumed(tmp_path / "cut", fake_trainer, Budget(time_s=3600))
    assert again.stopped is None
    again.finish()
    assert outcome(again) == outcome(whole)


def test_a_search_that_ends_within_its_budget_is_not_stopped(tmp_path, fake_trainer):
    search = fake_search(tmp_path, fake_trainer, budget=Budget(time_s=3600, trials=17))
    search.run(HYPERBAND)
    assert search.stopped is None and len(search.trials) == 17


def kept_models(run_dir) -> dict[str, tuple[str, str]]:
    """The "models" a search on the fake kept: each trial's file and what it holds (whose
    weights, at which step)."""
    results = json.loads((run_dir / "results.json").read_text())
    return {trial_id: (kept["file"], (run_dir / kept["file"]).read_text())
            for trial_id, kept in (results.get("models") or {}).items()}


@pytest.mark.tf  # composing mlp3's config imports Keras
def test_a_stopped_run_journals_why_and_resumes_with_a_larger_budget(tmp_path, capsys):
    """experiment=quick draws 3 then 2 configurations: a budget of 4 stops after the first
    bracket; resumed with 5 it ends with the trials and scores of an unbroken run (on the
    fake trainer: the check is the stop and the resume's bookkeeping)."""
    quick = ("experiment=quick", "tracking=none")
    whole = search_on_fake(tmp_path / "whole", *quick)
    cut = tmp_path / "cut"
    capsys.readouterr()
    first = search_on_fake(cut, *quick, "budget.trials=4")
    assert ("ended: stopped early by budget.trials=4: 3 configurations drawn"
            in capsys.readouterr().out)
    stopped = [r for r in Journal(cut).read() if r["event"] in ("stopped", "finished")]
    assert [r["event"] for r in stopped] == ["stopped"]
    assert first["stopped"] == stopped[0]["reason"]
    assert first["models"] and any((cut / "checkpoints" / "kept").iterdir())  # for the resume
    resumed = search_on_fake(cut, *quick, "resume=true", "budget.trials=5")
    assert resumed["stopped"] is None and Journal(cut).read()[-1]["event"] == "finished"

    def scores(results):
        return {t["trial_id"]: (t["hparams"], t["status"],
                                [(r["epochs"], r["val_accuracy"]) for r in t["rungs"]])
                for t in results["trials"]}

    assert scores(resumed) == scores(whole)
    # It hands over the unbroken run's models, whichever session scored them.
    assert kept_models(cut) == kept_models(tmp_path / "whole") != {}
    assert not (cut / "checkpoints" / "kept").exists()


@pytest.mark.tf  # composing mlp3's config imports Keras
def test_a_budget_that_ends_before_any_score_says_so_in_one_line(tmp_path, caplog):
    """experiment=quick's first plan draws 3 configurations: a budget of 2 draws none, and
    the run says so, with the command that resumes it (a library call logs it as a warning
    too: its warnings reach stderr)."""
    results = search_on_fake(tmp_path, "experiment=quick", "tracking=none", "budget.trials=2")
    assert results["best"] is None and results["stopped"].startswith("budget.trials=2")
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
              and "before any trial was scored" in r.getMessage()]
    assert line.startswith(f"the budget ended the search before any trial was scored "
                           f"({results['stopped']}); no best configuration yet: resume it "
                           "with a larger budget: ")
    assert "resume=true" in line and str(tmp_path) in line


def test_a_budget_stop_prints_the_command_that_resumes_it_with_the_run_s_overrides(tmp_path):
    """The command says at the start what its schedule ends at (3 brackets) if the time
    budget does not; budget.trials=10 stops it after the first bracket's 9 configurations;
    the summary and results.json say so, with the command that goes on: the run's overrides,
    the budget raised. That command, run, ends the search at its schedule's end."""
    args = ("executor=simulated", "strategy=knn", "tracking=none", "budget.time_s=3600")
    first = run_command(*args, "budget.trials=10", "hydra.run.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert ("budget.time_s=3600 is a limit, not a target: Hyperband ends after its 3 brackets "
            "(17 configurations, 69 epochs), if that comes first\n") in first.stdout
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["ended"] == "budget.trials" and results["stopped"] == (
        "budget.trials=10: 9 configurations drawn, the next plan draws 5")
    command = ("python -m packexp executor=simulated strategy=knn tracking=none "
               "budget.time_s=3600 budget.trials=20 resume=true hydra.run.dir=run")
    assert (f"ended: stopped early by {results['stopped']}; resume it with a larger budget: "
            f"{command}\n") in first.stdout
    again = run_command(*shlex.split(command)[3:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["ended"] == "schedule" and results["stopped"] is None
    assert len(results["trials"]) == 17 and load(tmp_path / "run").ended == "schedule"
    assert ("ended: the schedule ran to its end (scheduler hyperband: 17 configurations, "
            f"{results['epochs_spent']:g} epochs trained)\n") in again.stdout
