"""A time budget counts the search, from its first pack: not the start-up, the calibration or
the first plan's probes before it; a search it stops before any trial is scored says so; a
budget the schedule may end first is said at the start; a stop's resume raises the budget;
what ended a search is read from an older release's results too."""

from __future__ import annotations

import time

from packexp.records.facts import ENDS, SearchFacts, ended_by
from packexp.runner.budget import Budget, unscored
from packexp.runner.study import earlier_s
from packexp.schedulers.asha import Asha
from packexp.schedulers.hyperband import Hyperband
from packexp.testing.fake_trainer import HYPERBAND, fake_search


def test_a_long_start_up_spends_none_of_the_budget(tmp_path, fake_trainer):
    search = fake_search(tmp_path, fake_trainer, budget=Budget(time_s=30))
    search.started -= 100.0  # a calibration and a probe of 100 s before the search
    assert search.searched_s() == 0.0  # nothing searched before the first pack
    search.run(HYPERBAND)
    assert search.stopped is None and len(search.trials) == 17
    assert 0.0 < search.searched_s() < 30.0


def test_the_searched_seconds_count_earlier_sessions_and_this_one_s_from_its_first_pack(
        tmp_path, fake_trainer):
    search = fake_search(tmp_path, fake_trainer)
    search.study.earlier_s = earlier_s([{"event": "start"}, {"event": "pack", "elapsed_s": 7.0},
                                        {"event": "resume"}])  # a session before
    assert search.searched_s() == 7.0
    search.clock.first_pack_at = time.time() - 2.0
    search.clock.started = time.perf_counter() - 2.0
    assert 9.0 <= search.searched_s() < 10.0


def test_a_budget_spent_before_any_score_says_so_with_the_resume_command():
    line = unscored("budget.time_s=3: 6.2 s searched",
                    "python -m packexp budget.time_s=3 resume=true hydra.run.dir=outputs/x")
    assert "\n" not in line
    assert line == ("the budget ended the search before any trial was scored (budget.time_s=3: "
                    "6.2 s searched); no best configuration yet: resume it with a larger "
                    "budget: python -m packexp budget.time_s=3 resume=true "
                    "hydra.run.dir=outputs/x")


def test_a_budget_its_schedule_may_end_first_is_said_at_the_start():
    """ASHA's default max_epochs (Hyperband's 69 at R=9) ends a search of budget.time_s=20 in
    seconds on mnist1d: the line says so and names the key; a trials budget past what the
    schedule draws never applies."""
    asha, hyperband = Asha(9), Hyperband(9, 3)
    assert Budget().ahead(asha) is None and Budget(trials=5).ahead(hyperband) is None
    assert Budget(time_s=20).ahead(asha) == (
        "budget.time_s=20 is a limit, not a target: ASHA ends once it has trained 69 epochs "
        "in all (scheduler.max_epochs; a larger one searches longer), if that comes first")
    assert Budget(time_s=60, trials=100).ahead(hyperband) == (
        "budget.time_s=60 is a limit, not a target: Hyperband ends after its 3 brackets (17 "
        "configurations, 69 epochs), if that comes first; budget.trials=100 never applies: "
        "Hyperband draws 17 configurations in all")
    assert Budget(trials=17).ahead(hyperband).startswith("budget.trials=17 never applies")
    assert Budget(trials=16).ahead(hyperband) is None  # the third bracket's draw is refused
    assert Budget(trials=30).ahead(asha) == (
        "budget.trials=30 may never apply: ASHA draws about 29 configurations in its 69 "
        "epochs")


def test_a_budget_stop_resumes_with_the_budget_that_stopped_it_raised():
    assert Budget(time_s=20).raised("budget.time_s=20: 20.3 s searched") == "budget.time_s=40"
    assert Budget(time_s=20, trials=12).raised(
        "budget.trials=12: 9 configurations drawn, the next plan draws 5") == "budget.trials=24"
    # at least what the refused plan draws: a resume with less would stop again at once
    assert Budget(trials=10).raised(
        "budget.trials=10: 0 configurations drawn, the next plan draws 81") == "budget.trials=81"


def test_what_ended_a_search_is_read_from_stopped_where_an_older_release_did_not_write_it():
    assert SearchFacts.of({}).ended == "schedule"
    assert SearchFacts.of({"stopped": "budget.time_s=3: 6.2 s searched"}).ended == (
        "budget.time_s")
    assert SearchFacts.of({"stopped": None, "ended": "schedule"}).ended == "schedule"
    assert [ended_by(None), ended_by("budget.trials=4: 3 configurations drawn, the next plan "
                                     "draws 2")] == ["schedule", "budget.trials"]
    assert set(ENDS) == {"schedule", "budget.time_s", "budget.trials"}
