"""Continuation on promotion and resuming a killed search from its journal."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict

from packexp.app.main import run
from packexp.errors import ConfigError
from packexp.runner.journal import Journal
from packexp.testing.config import compose_config

pytestmark = pytest.mark.tf

QUICK9 = ["experiment=quick", "scheduler.R=9"]


def tune(run_dir, *overrides, tracking="none", store=None):
    cfg = compose_config([*QUICK9, f"tracking={tracking}", *overrides])
    if store is not None:
        with open_dict(cfg):
            cfg.tracking.store_dir = str(store)
    run(cfg, run_dir=run_dir)
    return json.loads((run_dir / "results.json").read_text())


def scores(results: dict) -> dict:
    return {t["trial_id"]: [(r["rung"], r["epochs"], r["steps"], r["val_accuracy"],
                             r["val_loss"]) for r in t["rungs"]]
            for t in results["trials"]}


def test_continuing_gives_the_scores_of_retraining_from_scratch(tmp_path):
    # Plain packs, so the comparison is exact; fused packs agree to rounding.
    continued = tune(tmp_path / "c", "pack.fusion=off")
    scratch = tune(tmp_path / "s", "scheduler.continue_on_promotion=false", "pack.fusion=off")
    assert scores(continued) == scores(scratch)
    steps = lambda res: sum(p["steps"] for p in res["packs"])  # noqa: E731
    assert steps(continued) < steps(scratch)


def test_promoted_trials_train_only_the_extra_epochs(tmp_path):
    results = tune(tmp_path)
    trials = {t["trial_id"]: t for t in results["trials"]}
    later = [p for p in results["packs"] if p["rung"] > 0]
    assert later
    for pack in later:
        rungs = [{r["rung"]: r["steps"] for r in trials[m]["rungs"]} for m in pack["members"]]
        extra = [r[pack["rung"]] - r[pack["rung"] - 1] for r in rungs]
        assert all(r[pack["rung"]] == 3 * r[pack["rung"] - 1] for r in rungs)  # eta = 3
        assert pack["steps"] == max(extra)


def test_checkpoints_of_retired_trials_are_removed(tmp_path):
    tune(tmp_path)
    assert not any((tmp_path / "checkpoints").glob("*/*"))


def kill_after(monkeypatch, packs: int):
    """Makes the search die (as if killed) once ``packs`` packs have been committed."""
    import packexp.runner.ledger as ledger

    original = ledger.Ledger.commit
    done = []

    def finish(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        done.append(1)
        if len(done) == packs:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(ledger.Ledger, "commit", finish)
    return original


@pytest.mark.parametrize("strategy", ["knn", "none", "cost", "knn-asha"])
def test_a_resumed_run_ends_as_an_uninterrupted_one(tmp_path, monkeypatch, strategy):
    """Under ``knn`` packs are fused (experiment=quick trains plain ones). Under ``cost``
    the resumed session reads the run's own calibration back (the kept one is deleted
    first). It plans the rungs still to come from its own pack cache, so it may pack them
    differently from an unbroken run: with plain packs the scores are the same bit for bit
    all the same. Under ``scheduler=asha`` (one worker) the resumed run makes the unbroken
    one's plans, promotions and draws."""
    kept = tmp_path / "calibrations"
    strategy = [f"strategy={strategy.split('-')[0]}"] + (
        [f"strategy.calibration_dir={kept}", "pack.fusion=off"] if strategy == "cost" else []
        ) + (["scheduler=asha"] if strategy.endswith("asha") else []) + (
        ["pack.fusion=auto"] if strategy == "knn" else [])  # fused packs; quick's are plain
    whole = tune(tmp_path / "whole", *strategy)
    assert any(p["fused"] for p in whole["packs"]) == ("pack.fusion=auto" in strategy)
    original = kill_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        tune(tmp_path / "killed", *strategy)
    for calibration in kept.glob("*.json"):
        calibration.unlink()
    assert not (tmp_path / "killed" / "results.json").exists()
    finished = [r for r in Journal(tmp_path / "killed").read() if r["event"] == "result"]
    assert finished
    import packexp.runner.ledger as ledger

    trained = []

    def finish(self, bracket, rung, epochs, pack_id, pack_run, *rest):
        trained.extend((m.trial_id, rung) for m in pack_run.members)
        return original(self, bracket, rung, epochs, pack_id, pack_run, *rest)

    monkeypatch.setattr(ledger.Ledger, "commit", finish)
    resumed = tune(tmp_path / "killed", *strategy, "resume=true")
    assert not list(kept.glob("*.json")), "the resumed session measured a new calibration"
    assert scores(resumed) == scores(whole)
    assert resumed["best"] == whole["best"]
    assert resumed["resumed"]
    assert {p["session"] for p in resumed["packs"]} == {0, 1}
    assert [a["elapsed_s"] for a in resumed["anytime"]] == sorted(
        a["elapsed_s"] for a in resumed["anytime"])  # the second session after the first
    journaled = {(r["trial_id"], r["rung"]) for r in finished}
    assert not journaled & set(trained), "finished work was retrained"
    assert len(trained) + len(journaled) == sum(len(t["rungs"]) for t in whole["trials"])


def test_resume_reattaches_mlflow_runs(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    original = kill_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        tune(tmp_path / "run", tracking="mlflow", store=tmp_path / "store")
    import packexp.runner.ledger as ledger

    monkeypatch.setattr(ledger.Ledger, "commit", original)
    resumed = tune(tmp_path / "run", "resume=true", tracking="mlflow", store=tmp_path / "store")
    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.info.run_name for r in children) == sorted(
        t["trial_id"] for t in resumed["trials"])
    for child in children:
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        trial = next(t for t in resumed["trials"] if t["trial_id"] == child.info.run_name)
        assert len(history) == len(trial["rungs"])  # nothing logged twice


def test_resume_without_a_journal_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"resume=true: .*no journal here"):
        tune(tmp_path, "resume=true")


def test_resume_with_another_config_names_the_key(tmp_path, monkeypatch):
    original = kill_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        tune(tmp_path, "seed=1")
    import packexp.runner.ledger as ledger

    monkeypatch.setattr(ledger.Ledger, "commit", original)
    with pytest.raises(ConfigError, match=r"resume=true: seed=0 here, but the journal has "
                                          r"seed=1"):
        tune(tmp_path, "resume=true")
    with pytest.raises(ConfigError, match=r"search_space\.params\.batch_size"):
        tune(tmp_path, "seed=1", "resume=true", "search_space.params.batch_size=[20,30]")


def test_a_fresh_run_refuses_a_directory_with_a_journal(tmp_path):
    tune(tmp_path)
    with pytest.raises(ConfigError, match="holds a journal already"):
        tune(tmp_path)
    with pytest.raises(ConfigError, match="has finished already"):
        tune(tmp_path, "resume=true")


def test_plan_task_trains_nothing_and_writes_the_bracket_table(tmp_path, capsys):
    cfg = compose_config(["task=plan", "scheduler.R=81", "scheduler.eta=3", "tracking=none"])
    total = run(cfg, run_dir=tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["R"], plan["eta"]) == (81, 3)
    assert [[(r["n"], r["r"]) for r in b["rungs"]] for b in plan["brackets"]][:2] == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)], [(34, 3), (11, 9), (3, 27), (1, 81)]]
    assert total == sum(b["epochs_continued"] for b in plan["brackets"]) == 1581
    assert sum(b["epochs_from_scratch"] for b in plan["brackets"]) == 1902
    first = plan["brackets"][0]["first_rung_packs"]
    assert sorted(t for p in first for t in p) == sorted(f"b4-t{i:03d}" for i in range(81))
    assert max(len(p) for p in first) <= 8
    out = capsys.readouterr().out
    assert "206 evaluations" in out and "1581" in out
    assert not (tmp_path / "results.json").exists()
    assert not (tmp_path / "journal.jsonl").exists()
