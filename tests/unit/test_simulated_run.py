"""``executor=simulated`` through the config, as ``python -m packexp`` runs it: the fake trainer
its file names scores the members (nothing trains), results.json says the times are the
simulation's, and the summary says they are predictions. Nothing here loads TensorFlow (the
config's checks need none), so the module is in the unit layer."""

from __future__ import annotations

import pytest

from packexp.errors import ConfigError
from packexp.testing.searches import search

SIMULATED = ("executor=simulated", "executor.num_workers=4", "tracking=none",
             "scheduler=asha", "scheduler.num_configs=40", "scheduler.max_epochs=120")


def test_a_simulated_search_through_the_config_reads_as_a_real_run_on_its_clock(tmp_path,
                                                                               capsys):
    results = search(tmp_path, *SIMULATED)
    assert results["simulated"] is True
    assert results["simulation"]["workers"] == 4
    assert results["simulation"]["durations"]["step_s"] == {"1": 0.195, "2": 0.2}
    packs = results["packs"]
    assert all(p["worker"] in range(4) and p["host"] == "simulated" for p in packs)
    assert all(k["file"].endswith(".json") for k in results["models"].values())  # the fake's
    spans = [(p["started_s"], p["started_s"] + p["duration_s"]) for p in packs]
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])
    total = sum(p["duration_s"] for p in packs)
    assert results["wall_time_s"] < total
    assert results["workers"]["busy_s"] == pytest.approx(total, abs=0.1)
    assert results["wall_time_s"] == pytest.approx(max(e for _, e in spans), abs=1e-2)
    assert 0 <= results["real_wall_time_s"] < results["wall_time_s"]
    assert results["anytime"][-1]["elapsed_s"] == pytest.approx(results["wall_time_s"], abs=1e-2)
    assert (tmp_path / "timeline.png").is_file()
    out = capsys.readouterr().out
    assert "simulated on 4 workers: every time below" in out and "not a measurement" in out
    assert "of simulated time from the first pack" in out


def test_a_local_search_says_nothing_of_a_simulation(tmp_path):
    from packexp.testing.searches import search_on_fake

    results = search_on_fake(tmp_path, "tracking=none", "experiment=quick")
    assert "simulated" not in results and "real_wall_time_s" not in results


def test_the_cost_strategy_is_refused_on_the_simulations_fake_trainer(tmp_path):
    with pytest.raises(ConfigError, match=r"^strategy=cost: weighs costs measured on the device, "
                                          r"which executor=simulated's fake trainer does not "
                                          r"measure; add strategy=knn"):
        search(tmp_path, *SIMULATED, strategy=None)
