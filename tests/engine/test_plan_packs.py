"""task=plan shows the packs the search forms: each bracket's first rung (ASHA's first plan),
for the same config, seed and calibration, compared with the journal of the search run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packexp.app.main import run
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer


def planned(run_dir: Path, *overrides: str, strategy: str = "knn",
            trainer: FakeTrainer | None = None) -> dict:
    run(compose_config(["task=plan", "tracking=none", *overrides], strategy=strategy),
        run_dir=run_dir, trainer=trainer)
    return json.loads((run_dir / "plan.json").read_text())


def searched(run_dir: Path, *overrides: str, strategy: str = "knn",
             trainer: FakeTrainer | None = None) -> tuple[dict, dict]:
    """The search's first plan of each bracket's first rung (bracket to its packs), and each
    trial's configuration."""
    run(compose_config(["tracking=none", *overrides], strategy=strategy), run_dir=run_dir,
        trainer=trainer)
    first: dict[int, list[list[str]]] = {}
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "plan" and event["rung"] == 0:
            first.setdefault(event["bracket"], event["packs"])
    results = json.loads((run_dir / "results.json").read_text())
    return first, {t["trial_id"]: t["hparams"] for t in results["trials"]}


def plan_packs(plan: dict) -> dict[int, list[list[str]]]:
    return {b["s"]: b["first_rung_packs"] for b in plan["brackets"]}


@pytest.mark.parametrize("overrides", [
    ("scheduler.R=9",),  # Hyperband: three brackets
    ("scheduler=asha", "scheduler.R=9", "scheduler.num_configs=12"),  # its first 8, then 4
], ids=["hyperband", "asha"])
def test_the_plan_shows_the_packs_the_search_forms_on_the_fake(tmp_path, overrides):
    """The capacity is the trainer's (the fake's two members, not the memory budget's eight)
    and the draws the search's: every bracket's first-rung packs and configurations alike."""
    plan = planned(tmp_path / "plan", *overrides, trainer=FakeTrainer(failing=""))
    packs, configs = searched(tmp_path / "run", *overrides, trainer=FakeTrainer(failing=""))
    assert plan_packs(plan) == packs
    assert all(len(p) <= 2 for b in packs.values() for p in b)  # the fake's capacity
    assert plan["capacity"] == {"source": "fake trainer", "bytes": 2.0, "max_members": None}
    for b in plan["brackets"]:
        assert b["first_rung_configs"] == {i: configs[i] for i in b["first_rung_configs"]}
    assert plan["run_may_differ"] == []  # nothing measured: a count, no calibration


@pytest.mark.tf
@pytest.mark.parametrize("overrides", [
    (),  # the default: Hyperband R=9 on digits (its plan showed 2 packs, the search 9)
    ("scheduler=asha", "dataset=mnist1d", "scheduler.num_configs=9"),  # showed 1, formed 8
], ids=["hyperband", "asha"])
def test_the_plan_shows_the_packs_strategy_cost_forms(tmp_path, overrides):
    """Under the cost model the plan weighs what the search weighs (the trials still to come,
    checkpoints, runtime structures, the cache), with the calibration the plan measured and
    kept: the first bracket's packs are the search's. Later brackets' are as the cache stands
    before the search, which the plan's line says."""
    kept = f"strategy.calibration_dir={tmp_path / 'kept'}"
    plan = planned(tmp_path / "plan", *overrides, kept, strategy="cost")
    packs, configs = searched(tmp_path / "run", *overrides, kept, strategy="cost")
    first = plan["brackets"][0]
    assert first["first_rung_packs"] == packs[first["s"]]
    assert first["first_rung_configs"] == {i: configs[i] for i in first["first_rung_configs"]}
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["calibration"]["source"] == "kept"  # the one the plan measured
    assert results["calibration"]["digest"] == plan["calibration"]["digest"]
    differ = plan["run_may_differ"]
    assert differ[0] == f"a calibration other than {plan['calibration']['digest']}"
    assert any("split in two" in r for r in differ)
    assert any("earlier brackets" in r for r in differ) == (len(plan["brackets"]) > 1)
