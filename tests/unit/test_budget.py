"""A time budget counts the search, from its first pack: not the start-up, the calibration or
the first plan's probes before it; a search it stops before any trial is scored says so."""

from __future__ import annotations

import time

from packexp.runner.budget import Budget, unscored
from packexp.runner.study import earlier_s
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
