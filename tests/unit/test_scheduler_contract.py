"""The scheduler contract, over every file of ``conf/scheduler/``: a new scheduler is one
module in ``packexp/schedulers/`` and one YAML file, and these tests enlist it.

Each scheduler, at its config's values, checks its schedule, drives a search on the fake
trainer (no TensorFlow) to an end where every trial is ended and no checkpoint is left, and
drives a search killed mid-way, resumed from its journal, to the unbroken one's results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packexp.config import instantiate
from packexp.runner.journal import Journal
from packexp.schedulers import Scheduler
from packexp.testing.config import CONF_DIR, compose_config
from packexp.testing.fake_trainer import FakeTrainer, fake_search, outcome

SCHEDULERS = sorted(p.stem for p in Path(CONF_DIR, "scheduler").glob("*.yaml"))


def scheduler(name: str) -> Scheduler:
    cfg = compose_config([f"scheduler={name}"])
    return instantiate(cfg.scheduler, "scheduler")


def to_the_end(run_dir: Path, trainer: FakeTrainer, policy: Scheduler, records=None):
    search = fake_search(run_dir, trainer, policy.brackets())  # a journal there: resumed
    assert search.study.journaled == (records or [])
    search.run(policy)
    search.finish()
    return search


def test_every_scheduler_is_found():
    assert {"hyperband", "asha", "pbt"} <= set(SCHEDULERS)


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_schedulers_config_names_a_scheduler_in_its_own_module(name):
    policy = scheduler(name)
    assert isinstance(policy, Scheduler)
    assert type(policy).__module__ == f"packexp.schedulers.{name}"


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_schedulers_defaults_make_a_schedule_that_stops_configurations_early(name):
    policy = scheduler(name)
    policy.check_schedule()
    brackets = policy.brackets()
    assert brackets
    for bracket in brackets:
        epochs = [rung.r for rung in bracket.rungs]
        assert epochs == sorted(epochs) and epochs[-1] <= policy.R
        assert all(rung.n >= 1 for rung in bracket.rungs)
        assert policy.epochs(bracket) > 0
    json.dumps(policy.plan_facts())  # task=plan prints them


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_scheduler_drives_a_search_to_an_end_that_leaves_nothing_running(name, tmp_path,
                                                                          fake_trainer):
    search = to_the_end(tmp_path, fake_trainer, scheduler(name))
    assert fake_trainer.calls
    statuses = {t.status for t in search.trials.values()}
    assert statuses <= {"finished", "killed", "failed"} and "finished" in statuses
    assert not list((tmp_path / "checkpoints").rglob("*.json"))
    best = search.best()
    scored = [r.val_accuracy for t in search.trials.values() for r in t.rungs
              if r.val_accuracy is not None]
    assert best is not None and best.val_accuracy == max(scored)
    journaled = [r for r in Journal(tmp_path).read() if r["event"] == "result"]
    assert len(journaled) == sum(len(t.rungs) for t in search.trials.values())


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_killed_search_resumes_to_the_unbroken_ones_results(name, tmp_path, fake_trainer):
    whole = to_the_end(tmp_path / "whole", fake_trainer, scheduler(name))
    everything = fake_trainer.trained()
    fake_trainer.die_at_call, fake_trainer.calls = len(fake_trainer.calls) // 2, []
    with pytest.raises(KeyboardInterrupt):
        to_the_end(tmp_path / "killed", fake_trainer, scheduler(name))
    records = Journal(tmp_path / "killed").read()
    fake_trainer.die_at_call, fake_trainer.calls = None, []
    resumed = to_the_end(tmp_path / "killed", fake_trainer, scheduler(name), records)
    journaled = [(r["trial_id"], r["epochs"]) for r in records if r["event"] == "result"]
    assert journaled and not set(journaled) & set(fake_trainer.trained())
    assert sorted(journaled + fake_trainer.trained()) == sorted(everything)
    assert outcome(resumed) == outcome(whole)
    assert [p.pack_id for p in resumed.packs] == [p.pack_id for p in whole.packs]
    assert resumed.best() == whole.best()


@pytest.mark.parametrize("name", SCHEDULERS)
def test_a_scheduler_describes_itself_to_the_plan_table_the_run_name_and_refit(name):
    policy = scheduler(name)
    assert policy.title != Scheduler.title
    assert policy.title in policy.plan_title(len(policy.brackets()))
    assert policy.budget_name.endswith(f"{policy.R}") and " " not in policy.budget_name
    # A scheduler that makes exploits says so (refit follows its lineages).
    assert policy.explores == (type(policy).on_exploits is not Scheduler.on_exploits)


@pytest.mark.parametrize("name", SCHEDULERS)
def test_the_progress_bar_names_the_scheduler_that_runs(name, tmp_path):
    import io
    import re

    from rich.console import Console

    from packexp.listeners import SearchProgress

    policy, out = scheduler(name), io.StringIO()
    search = fake_search(tmp_path, FakeTrainer(), policy.brackets())
    with SearchProgress(policy, Console(file=out, force_terminal=True, width=120)) as bar:
        search.listeners.listeners.append(bar)
        search.run(policy)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without the colours
    if policy.budget is None:  # a bar per rung of each bracket
        assert "bracket 1/" in text, text
    else:  # one bar of the epochs: a PBT run's says PBT, not ASHA
        assert f"{policy.title}: pack" in text, text
    others = {scheduler(n).title for n in SCHEDULERS} - {policy.title}
    assert not [t for t in others if f"{t}: pack" in text], text
