"""``scheduler=pbt`` end to end on real TensorFlow: exploits copy exactly, lineage is kept in
results.json, the journal and MLflow, and a killed population resumes to the unbroken
run's lineage and scores."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys

import pytest
from hydra.utils import instantiate

from packexp.app.main import run
from packexp.records.record import TrialRecord
from packexp.runner.journal import Journal
from packexp.space.options import steps_for
from packexp.testing.config import ROOT, compose_config
from packexp.testing.fake_trainer import FakeTrainer
from packexp.testing.searches import search

pytestmark = pytest.mark.tf

# Plain packs (not fused, not compiled): a member's numbers are bit for bit its own.
POP = ["scheduler=pbt", "scheduler.population=4", "scheduler.epochs=6",
       "scheduler.interval=2", "tracking=none", "pack.fusion=off", "pack.jit_compile=false"]
# Explore that changes nothing: an exploited member has its donor's values.
UNCHANGED = ["scheduler.perturbation_factors=[1.0]", "scheduler.resample_probability=0"]


def tune(run_dir, *overrides, trainer=None):
    """The population; on ``trainer`` (a ``FakeTrainer``) where the check is bookkeeping."""
    run(compose_config([*POP, *overrides]), run_dir=run_dir, trainer=trainer)
    return json.loads((run_dir / "results.json").read_text())


def numbers(rung: dict) -> tuple:
    return rung["steps"], rung["val_accuracy"], rung["val_loss"], rung["train_loss"]


@pytest.mark.parametrize("strategy", ["none", "knn"])
def test_an_exploited_member_trains_on_exactly_as_its_donor(tmp_path, strategy):
    """With its donor's values, weights, optimizer state and data order, a member that copied
    another trains on to the same numbers, bit for bit: alone (none) or in the donor's pack
    (knn), where the copy is between two members of one pack."""
    results = tune(tmp_path, f"strategy={strategy}", *UNCHANGED)
    trials = {t["trial_id"]: t for t in results["trials"]}
    copied = [(t, e) for t in trials.values() for e in t.get("lineage", ())]
    assert len(copied) == 2  # one member replaced at each of two interval ends
    for member, exploit in copied:
        donor = trials[exploit["donor"]]
        rung = [r["epochs"] for r in member["rungs"]].index(exploit["epoch"])
        assert numbers(member["rungs"][rung]) != numbers(donor["rungs"][rung])
        assert numbers(member["rungs"][rung + 1]) == numbers(donor["rungs"][rung + 1])
        assert exploit["hparams"] == TrialRecord.from_dict(donor).hparams_at(exploit["epoch"])
        if strategy == "knn":
            assert member["rungs"][rung + 1]["pack_id"] == donor["rungs"][rung + 1]["pack_id"]
    assert results["programs"] <= 1  # exploits never trace (0: a test before traced it)


def test_an_exploited_member_starts_its_next_epoch_at_its_new_batch_size(tmp_path):
    results = tune(tmp_path, "strategy=none", "scheduler.resample_probability=1")
    train_size = len(instantiate(compose_config(POP).dataset, images=False).x_train)
    moved = 0
    for t in results["trials"]:
        for e in t.get("lineage", ()):
            after = next(r for r in t["rungs"] if r["epochs"] > e["epoch"])
            assert after["steps"] == steps_for(after["epochs"], e["hparams"]["batch_size"],
                                               train_size)
            moved += e["hparams"]["batch_size"] != e["before"]["batch_size"]
    assert moved, "no exploit changed a batch size"


def test_lineage_is_in_results_the_journal_and_the_best_names_its_schedule(tmp_path):
    results = tune(tmp_path, trainer=FakeTrainer(failing=""))
    journal = [r for r in Journal(tmp_path).read() if r["event"] == "exploit"]
    assert [r["epochs"] for r in journal] == [2.0, 4.0]
    lineage = {(t["trial_id"], e["epoch"]): e for t in results["trials"]
               for e in t.get("lineage", ())}
    assert {(e["member"], r["epochs"]) for r in journal for e in r["exploits"]} == set(lineage)
    best = results["best"]
    schedule = best["schedule"]
    assert schedule[0]["from"] == 0 and schedule[-1]["to"] == best["epochs"]
    assert all(a["to"] == b["from"] for a, b in itertools.pairwise(schedule))
    assert schedule[-1]["trial_id"] == best["trial_id"]
    assert schedule[-1]["hparams"] == best["hparams"]
    assert (tmp_path / "population.png").is_file()


def kept(results: dict) -> list[dict]:
    """The trials as results.json has them, less where their checkpoints were."""
    return [{**t, "rungs": [{k: v for k, v in r.items() if k != "checkpoint"}
                            for r in t["rungs"]]} for t in results["trials"]]


def kill_at(monkeypatch, where: str):
    """Makes the search die (as if killed) ``mid-interval``, once a pack of the interval
    after the first exploit has finished, or ``before effect``, once the first exploit is
    journaled but before the member's copy of its donor's state is written."""
    import packexp.packing.member as member
    import packexp.runner.ledger as ledger

    if where == "mid-interval":
        original = ledger.Ledger.commit

        def commit(self, bracket, rung, *args, **kwargs):
            out = original(self, bracket, rung, *args, **kwargs)
            if rung == 1:
                raise KeyboardInterrupt
            return out

        monkeypatch.setattr(ledger.Ledger, "commit", commit)
    else:
        write = member.write_state

        def write_state(state, path):
            if "-from-" in str(path):
                raise KeyboardInterrupt
            return write(state, path)

        monkeypatch.setattr(member, "write_state", write_state)


@pytest.mark.parametrize("where", ["mid-interval", "before effect"])
def test_a_killed_population_resumes_to_the_unbroken_lineage_and_scores(
        tmp_path, monkeypatch, where):
    whole = tune(tmp_path / "whole", "strategy=none")
    with monkeypatch.context() as patch:
        kill_at(patch, where)
        with pytest.raises(KeyboardInterrupt):
            tune(tmp_path / "killed", "strategy=none")
    events = [r["event"] for r in Journal(tmp_path / "killed").read()]
    assert "exploit" in events
    resumed = tune(tmp_path / "killed", "strategy=none", "resume=true")
    assert kept(resumed) == kept(whole)  # rungs, scores, lineage and statuses
    assert resumed["best"] == whole["best"]
    assert [r["event"] for r in Journal(tmp_path / "killed").read()].count("exploit") == 2


# ``python -m packexp`` killed (SIGKILL, by its own hand) as the first result after its
# first exploit is journaled: where a user's kill -9 would find it mid-population, however
# late a loaded machine would let a watching test send it.
KILLED_AFTER_AN_EXPLOIT = """
import os, runpy, signal, sys
from packexp.events import MemberScored, MembersExploited
from packexp.runner.study import Study

exploited = []
write = Study.write


def journaled(self, event):
    write(self, event)
    if isinstance(event, MembersExploited):
        exploited.append(event)
    elif isinstance(event, MemberScored) and exploited:
        os.kill(os.getpid(), signal.SIGKILL)


Study.write = journaled
runpy.run_module("packexp", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_kill_9_of_a_population_then_resume_gives_the_unbroken_run(tmp_path):
    """The population is killed as a user's command would be; the unbroken run and the resume
    run in this process (the same search, as run(cfg))."""
    args = ["strategy=knn", *POP[:5], "seed=3"]
    whole = search(tmp_path / "whole", *args)
    run_dir = tmp_path / "killed"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", KILLED_AFTER_AN_EXPLOIT, *args,
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    events = [r["event"] for r in Journal(run_dir).read()]
    assert events[events.index("exploit") + 1:].count("result") == 1
    assert "finished" not in events
    assert kept(search(run_dir, *args, "resume=true")) == kept(whole)


def test_mlflow_has_each_members_values_by_epoch_and_each_exploit(tmp_path):
    import mlflow

    tune(tmp_path / "run", "tracking=mlflow", f"tracking.store_dir={tmp_path / 'store'}",
         trainer=FakeTrainer(failing=""))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "packexp"]
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])
            if r.data.tags.get("mlflow.parentRunId")}
    for trial in results["trials"]:
        record = TrialRecord.from_dict(trial)
        run_ = runs[trial["trial_id"]]
        history = sorted((m.step, m.value) for m in client.get_metric_history(
            run_.info.run_id, "hparam_learning_rate"))
        assert history == [(step, pytest.approx(record.hparams_at(step + 0.5)["learning_rate"]))
                           for step in (0, 2, 4)]
        exploits = {k: v for k, v in run_.data.tags.items() if k.startswith("exploit_")}
        assert sorted(exploits) == [f"exploit_{e['epoch']:g}" for e in trial.get("lineage", ())]
        for e in trial.get("lineage", ()):
            assert exploits[f"exploit_{e['epoch']:g}"].startswith(f"copied {e['donor']} (")


def test_plan_shows_the_population_its_intervals_and_its_budget(tmp_path, capsys):
    run(compose_config([*POP, "task=plan"]), run_dir=tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["population"] == 4 and plan["replaced_per_interval"] == 1
    assert plan["interval_ends"] == [2.0, 4.0, 6.0] and plan["budget_epochs"] == 24
    assert "PBT: a population of 4, 6 epochs each" in capsys.readouterr().out
    assert not (tmp_path / "journal.jsonl").exists()


# Members at a learning rate of 10^4 diverge in their first interval.
DIVERGING = ["search_space.params.learning_rate=[0.001,10000.0]",
             "search_space.params.optimizer=[sgd]", *UNCHANGED]


def test_a_diverged_member_copies_a_live_one_and_a_resume_after_its_donor_moved_on(
        tmp_path, monkeypatch):
    """A diverged member is retired (its checkpoints deleted), then exploited: it trains on
    from its donor's copy, which a resume still finds after the donor's next interval has
    deleted the donor's own checkpoint of the copy point."""
    whole = tune(tmp_path / "whole", "strategy=none", *DIVERGING)
    diverged = {t["trial_id"] for t in whole["trials"] if t["rungs"][0]["val_accuracy"] is None}
    assert diverged, "no member diverged"
    for t in whole["trials"]:
        assert t["status"] == "finished"
        assert [r["epochs"] for r in t["rungs"]] == [2.0, 4.0, 6.0]
        assert all(r["val_accuracy"] is not None for r in t["rungs"][1:])
    assert {t["trial_id"] for t in whole["trials"] if t.get("lineage")} >= diverged
    assert whole["epochs_spent"] == 4 * 6  # a replaced member trains from its copy on
    import packexp.runner.ledger as ledger

    original = ledger.Ledger.commit

    def commit(self, bracket, rung, epochs, pack_id, pack_run, *args):
        out = original(self, bracket, rung, epochs, pack_id, pack_run, *args)
        if rung == 1 and {m.trial_id for m in pack_run.members} - diverged:
            raise KeyboardInterrupt  # a donor's next interval is journaled, no member's else
        return out

    with monkeypatch.context() as patch:
        patch.setattr(ledger.Ledger, "commit", commit)
        with pytest.raises(KeyboardInterrupt):
            tune(tmp_path / "killed", "strategy=none", *DIVERGING)
    resumed = tune(tmp_path / "killed", "strategy=none", *DIVERGING, "resume=true")
    assert kept(resumed) == kept(whole)
