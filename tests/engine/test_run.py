"""run(cfg) end to end in-process: results.json, the MLflow store, determinism."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
from omegaconf import open_dict

from packexp.app.main import run
from packexp.telemetry import gpu_device
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer
from packexp.testing.searches import search, search_on_fake
from packexp.tracking import TrackingError

pytestmark = pytest.mark.tf


def tune(tmp_path, *overrides: str, tracking: str = "none", trainer=None):
    """The quick search; on ``trainer`` (a ``FakeTrainer``) where the check is orchestration,
    on TensorFlow where it is the numbers."""
    cfg = compose_config(["experiment=quick", f"tracking={tracking}", *overrides])
    if tracking == "mlflow":
        with open_dict(cfg):
            cfg.tracking.store_dir = str(tmp_path / "store")
    out = tmp_path / "run"
    best = run(cfg, run_dir=out, trainer=trainer)
    return best, json.loads((out / "results.json").read_text()), out


# One search serves many tests: strategy=none at R=9 and seed 4, plain (every pack a single
# member, fusion off): the reference that packed, fused and cost-planned searches must score
# as. (That a pack of one trains plain under fusion=auto is asserted on the knn run of
# test_fused_packing_changes_scores_only_by_rounding.)
NONE_R9 = ("strategy=none", "scheduler.R=9", "seed=4", "pack.fusion=off")


@pytest.fixture(scope="module")
def none_r9(tmp_path_factory) -> dict:
    _, results, _ = tune(tmp_path_factory.mktemp("none_r9"), *NONE_R9)
    assert all(len(p["members"]) == 1 and not p["fused"] for p in results["packs"])
    return results


@pytest.fixture(scope="module")
def quick_tracked(tmp_path_factory) -> tuple[float, dict, object]:
    """The quick search tracked in MLflow, on the fake: its best, results and folder (the
    store in it)."""
    return tune(tmp_path_factory.mktemp("quick"), tracking="mlflow",
                trainer=FakeTrainer(failing=""))


def test_the_first_pack_reuses_no_member_of_another_pack(none_r9):
    """The member built to learn the model's structure is the first pack's own build, not a
    member of another pack (the summary said "1 members of other packs" for every search)."""
    packs = none_r9["packs"]
    assert packs[0]["reused_members"] == 0
    assert none_r9["reused_members"] == sum(p["reused_members"] for p in packs)


def plan(results: dict) -> tuple[list, list]:
    """The trials drawn, in order, and each pack's members."""
    return ([(t["trial_id"], t["hparams"]) for t in results["trials"]],
            sorted((p, t["trial_id"]) for t in results["trials"] for p in t["packs"]))


def scores(results: dict) -> dict:
    return {t["trial_id"]: [(r["rung"], r["epochs"], r["val_accuracy"]) for r in t["rungs"]]
            for t in results["trials"]}


def test_results_json_has_the_documented_keys(quick_tracked):
    best, results, out = quick_tracked
    assert {"strategy", "model", "dataset", "seed", "wall_time_s", "trials", "best"} <= set(
        results)
    assert (results["strategy"], results["model"], results["dataset"]) == (
        "knn", "mlp3", "digits")
    trial = results["trials"][0]
    assert {"trial_id", "hparams", "bracket", "rungs", "packs"} <= set(trial)
    assert {"rung", "epochs", "val_accuracy"} <= set(trial["rungs"][0])
    assert results["best"]["val_accuracy"] == best
    assert best == max(r["val_accuracy"] for t in results["trials"] for r in t["rungs"]
                       if r["val_accuracy"] is not None)
    plan = json.loads((out / "plan.json").read_text())
    assert [[r["n"] for r in b["rungs"]] for b in plan["brackets"]] == [[3, 1], [2]]
    # R=3, eta=3: 3 + 2 configurations, 3 + 1 + 2 evaluations.
    assert len(results["trials"]) == 5
    assert sum(len(t["rungs"]) for t in results["trials"]) == 6


def test_promoted_trials_are_the_best_of_their_rung(tmp_path):
    _, results, _ = tune(tmp_path, "scheduler.R=9", trainer=FakeTrainer(failing=""))
    for s in (2, 1):
        bracket = [t for t in results["trials"] if t["bracket"] == s]
        first = sorted(bracket, key=lambda t: -(t["rungs"][0]["val_accuracy"] or -1))
        promoted = [t for t in bracket if len(t["rungs"]) > 1]
        assert promoted
        assert {t["trial_id"] for t in promoted} == {t["trial_id"] for t in
                                                       first[: len(promoted)]}


def test_a_search_over_keras_optimizers_packs_them_plainly_and_exactly(tmp_path):
    """Optimizers without a fused rule pack plain under fusion=auto: the same scores, bit
    for bit, as each trial trained alone, through promotion and checkpoints; with their own
    arguments and learning-rate schedules whose horizon moves with each rung (quick's R=3:
    one promotion, from 1 epoch to 3; seed 2 draws all four optimizers)."""
    space = ("search_space.params.optimizer=[adamw,rmsprop,nadam,lion]", "seed=2",
             "+search_space.params.lr_schedule=[rex,cosine]",
             "+search_space.params.beta_2=[0.99,0.999]", "scheduler.lr_horizon=rung")
    _, none, _ = tune(tmp_path / "none", "strategy=none", *space)
    _, knn, _ = tune(tmp_path / "knn", "strategy=knn", "pack.fusion=auto", *space)
    assert max(len(p["members"]) for p in knn["packs"]) > 1
    assert not any(p["fused"] for p in knn["packs"])
    assert {t["hparams"]["optimizer"] for t in knn["trials"]} == {"adamw", "rmsprop", "nadam",
                                                                  "lion"}
    assert any(len(t["rungs"]) > 1 for t in knn["trials"])  # a promotion continued
    assert {t["hparams"]["lr_schedule"] for t in knn["trials"]} == {"rex", "cosine"}
    assert scores(none) == scores(knn)


def test_packing_changes_time_never_scores(tmp_path, capsys, none_r9):
    """Plain packs: bit-identical scores whatever the strategy."""
    none = none_r9
    _, knn, _ = tune(tmp_path / "knn", "strategy=knn", *NONE_R9[1:])
    assert max(len(p["members"]) for p in knn["packs"]) > 1
    assert "packs were fused" not in capsys.readouterr().out
    assert scores(none) == scores(knn)
    assert none["best"] == knn["best"]


def test_fused_packing_changes_scores_only_by_rounding(tmp_path, capsys, none_r9):
    """Fused packs (the default for mlp3 packs of two or more) against plain single-member
    packs: the same scores up to float32 rounding; the summary says so."""
    none = none_r9
    _, knn, _ = tune(tmp_path / "knn", "strategy=knn", "scheduler.R=9", "seed=4",
                     "pack.fusion=auto")  # experiment=quick trains plain packs
    summary = " ".join(capsys.readouterr().out.split())
    fused = sum(p["fused"] for p in knn["packs"])
    assert (f"{fused} of {len(knn['packs'])} packs were fused: their members' scores match "
            "training alone to float32 rounding, not bit for bit") in summary
    # Packs of two or more fuse; a pack of one trains plain under fusion=auto too.
    assert any(p["fused"] for p in knn["packs"])
    assert any(len(p["members"]) == 1 for p in knn["packs"])
    assert all(p["fused"] == (len(p["members"]) > 1) for p in knn["packs"])
    a, b = scores(none), scores(knn)
    assert a.keys() == b.keys()
    for trial_id, rungs in a.items():
        for (rung, epochs, acc), (rung2, epochs2, acc2) in zip(rungs, b[trial_id], strict=True):
            assert (rung, epochs) == (rung2, epochs2)
            assert (acc is None) == (acc2 is None)
            if acc is not None:
                assert abs(acc - acc2) <= 1 / 360 + 1e-9  # at most one validation example
    assert none["best"]["trial_id"] == knn["best"]["trial_id"]


def test_mlflow_parent_and_nested_trial_runs(quick_tracked):
    from mlflow.tracking import MlflowClient

    best, results, out = quick_tracked
    client = MlflowClient(f"sqlite:///{out.parent / 'store' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("packexp")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {k: parent.data.params[k] for k in ("strategy.seed", "seed")} == {
        "strategy.seed": "0", "seed": "0"}
    assert {parent.data.tags[k] for k in ("strategy", "model", "dataset")} == {
        "knn", "mlp3", "digits"}
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(best)
    assert len(children) == len(results["trials"])
    by_id = {r.info.run_name: r for r in children}
    for trial in results["trials"]:
        child = by_id[trial["trial_id"]]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.params["batch_size"] == str(trial["hparams"]["batch_size"])
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        assert [(m.step, m.value) for m in history] == [
            (round(r["epochs"]), pytest.approx(r["val_accuracy"])) for r in trial["rungs"]]
        expected = {"finished": "FINISHED", "killed": "KILLED", "failed": "FAILED"}
        assert child.info.status == expected[trial["status"]]
    assert {c.info.status for c in children} >= {"FINISHED", "KILLED"}


def test_unreachable_tracking_server_fails_before_training(tmp_path):
    cfg = compose_config(["experiment=quick", "tracking=mlflow",
                          "tracking.uri=http://127.0.0.1:9"])
    with pytest.raises(TrackingError, match=r"tracking\.uri=http://127\.0\.0\.1:9"):
        run(cfg, run_dir=tmp_path, trainer=FakeTrainer(failing=""))
    assert not (tmp_path / "results.json").exists()


def test_a_failed_run_writes_no_results_and_ends_its_mlflow_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    import packexp.runner.ledger as ledger

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(ledger.Ledger, "commit", explode)
    with pytest.raises(RuntimeError, match="boom"):
        tune(tmp_path, tracking="mlflow", trainer=FakeTrainer(failing=""))
    assert not (tmp_path / "run" / "results.json").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("packexp")
    [parent] = client.search_runs([exp.experiment_id])
    assert parent.info.status == "FAILED"


def test_cost_strategy_calibrates_once_predicts_every_pack_and_keeps_scores(tmp_path, capsys,
                                                                           none_r9):
    """strategy=cost end to end: a calibration measured, kept and reused; each pack's
    ``predicted_s`` beside its ``duration_s``; plain packs score as training alone does."""
    kept = tmp_path / "calibrations"
    exact = ("scheduler.R=9", "seed=4", "pack.fusion=off", f"strategy.calibration_dir={kept}")
    _, first, out = tune(tmp_path / "first", "strategy=cost", *exact)
    assert (out / "calibration.json").exists() and len(list(kept.glob("*.json"))) == 1
    assert all(p["predicted_s"] > 0 for p in first["packs"])
    assert first["prediction_error"] == pytest.approx(statistics.median(
        abs(p["predicted_s"] - p["duration_s"]) / p["duration_s"] for p in first["packs"]),
        abs=1e-4)
    assert "median relative error" in capsys.readouterr().out
    _, again, out = tune(tmp_path / "again", "strategy=cost", *exact)
    assert (first["calibration"]["source"], again["calibration"]["source"]) == (
        "measured", "kept")  # read back, not measured (a ratio of seconds flaked: #45)
    assert plan(again) == plan(first)  # measured just now or read back: one plan
    assert json.loads((out / "calibration.json").read_text())["key"] == json.loads(
        next(kept.glob("*.json")).read_text())["key"]
    assert exact[:3] == NONE_R9[1:]
    assert scores(again) == scores(first) == scores(none_r9)


def test_a_search_trains_in_the_programs_its_calibration_compiled_and_plans_as_if_not(
        tmp_path):
    """The calibration's compiled packs are shelved for the search (``PackCache.clear``):
    the run that measures it traces none of the programs they hold, and still packs and
    scores exactly as a run on the calibration read back, which traces its own."""
    kept = tmp_path / "calibrations"
    settings = ("strategy=cost", "scheduler.R=9", "seed=4", "pack.jit_compile=auto",
                f"strategy.calibration_dir={kept}")
    _, first, _ = tune(tmp_path / "first", *settings)
    _, again, _ = tune(tmp_path / "again", *settings)
    assert (first["calibration"]["source"], again["calibration"]["source"]) == (
        "measured", "kept")
    assert all(p["xla"] for p in first["packs"])  # compiled: what the shelf keeps
    assert plan(again) == plan(first)
    assert [p["pack_id"] for p in again["packs"]] == [p["pack_id"] for p in first["packs"]]
    exact = {t["trial_id"]: [(r["rung"], r["val_accuracy"], r["val_loss"], r["train_loss"])
                             for r in t["rungs"]] for t in first["trials"]}
    assert exact == {t["trial_id"]: [(r["rung"], r["val_accuracy"], r["val_loss"],
                                      r["train_loss"]) for r in t["rungs"]]
                     for t in again["trials"]}
    traced = [sum(p["programs"] + p["eval_programs"] for p in r["packs"])
              for r in (first, again)]
    # Every plan ends on single packs, and the calibration compiled a single's programs.
    # (A GPU shelves nothing.)
    assert traced[0] == traced[1] if gpu_device() else traced[0] < traced[1]


def test_an_asha_search_plans_alike_on_a_calibration_measured_or_read_back(tmp_path):
    """Under ASHA a pack of k members is k concurrent jobs, so pack composition steers the
    whole trajectory: a run that measures its calibration and one that reads it back must
    pack alike (the calibration's packs are not left in the search's cache)."""
    kept = tmp_path / "calibrations"
    settings = ("strategy=cost", "scheduler=asha", "scheduler.R=9", "seed=37",
                "pack.fusion=off", f"strategy.calibration_dir={kept}")
    _, first, out = tune(tmp_path / "first", *settings)
    _, again, _ = tune(tmp_path / "again", *settings)
    assert (first["calibration"]["source"], again["calibration"]["source"]) == (
        "measured", "kept")  # read back, not measured (a ratio of seconds flaked: #45)
    assert plan(again) == plan(first)
    assert scores(again) == scores(first) and again["best"] == first["best"]
    assert [p["pack_id"] for p in again["packs"]] == [p["pack_id"] for p in first["packs"]]
    # A copy of the calibration, named, pins the plan (on any device), and is on the run.
    pinned = tmp_path / "pinned.json"
    shutil.copy(out / "calibration.json", pinned)
    _, named, _ = tune(tmp_path / "named", *settings[:-1], "strategy.calibration_dir=null",
                       f"strategy.calibration={pinned}", tracking="mlflow")
    assert plan(named) == plan(first) and scores(named) == scores(first)
    assert [c["calibration"]["source"] for c in (first, again, named)] == [
        "measured", "kept", "file"]
    assert len({c["calibration"]["digest"] for c in (first, again, named)}) == 1
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'named' / 'store' / 'mlflow.db'}")
    [parent] = [r for r in client.search_runs(
        [client.get_experiment_by_name("packexp").experiment_id])
        if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["calibration_digest"] == named["calibration"]["digest"]
    assert parent.data.tags["calibration_source"] == "file"


def test_planning_with_the_cost_strategy_measures_a_calibration_once_for_every_r(tmp_path):
    """A fresh checkout plans under the default strategy: task=plan measures the calibration
    it lacks and keeps it; a plan at another R reads it back (R is not in its key)."""
    kept = tmp_path / "kept"
    for i, r in enumerate((9, 27)):
        cfg = compose_config(["task=plan", "strategy=cost", f"scheduler.R={r}",
                              f"strategy.calibration_dir={kept}"])
        assert run(cfg, run_dir=tmp_path / f"run{i}") > 0
        assert json.loads((tmp_path / f"run{i}" / "plan.json").read_text())["R"] == r
        assert len(list(kept.glob("*.json"))) == 1
    first, second = (json.loads((tmp_path / f"run{i}" / "calibration.json").read_text())
                     for i in range(2))
    assert first == second


@pytest.mark.search
@pytest.mark.parametrize(("model", "rates"), [
    ("cnn", "[0.01,0.1]"),  # a minute of MobileNetV2 on a CPU: make test-paper-cnns runs it
    pytest.param("mobilenet", "[0.001,0.01]", marks=pytest.mark.paper_cnns)])
def test_a_cnn_search_on_the_embedded_default_learns(tmp_path, model, rates):
    """A CNN on digits with no dataset key: images by default, and it learns.

    The space is cut to learning rates (each model's) and optimizers that train in a few
    epochs, so the best is far above chance (0.10) unless BatchNorm's evaluation statistics
    lag behind training (Keras's momentum 0.999 scored 0.10 in every MobileNetV2 trial).
    The estimate alone plans the packs (device.probe=false): a probe would only confirm that
    they fit.
    """
    results = search(tmp_path, f"model={model}", "strategy=knn", "experiment=quick",
                     "scheduler.R=3", f"search_space.params.learning_rate={rates}",
                     "search_space.params.optimizer=[momentum,adam]", "device.probe=false")
    assert results["model"] == model
    scores = [r["val_accuracy"] for t in results["trials"] for r in t["rungs"]]
    assert len(scores) == 3 + 1 + 2
    assert results["best"]["val_accuracy"] >= 0.6
    assert sum(s > 0.3 for s in scores) >= 3  # not one lucky trial


def test_a_search_over_ranges_end_to_end(tmp_path):
    """conf/search_space/ranges.yaml: an int range, choices and a log-uniform float range."""
    results = search_on_fake(tmp_path, "experiment=quick", "search_space=ranges", "strategy=knn",
                     "tracking=none")
    trials = [t["hparams"] for t in results["trials"]]
    assert len(trials) == 3 + 2
    rates = [h["learning_rate"] for h in trials]
    assert all(isinstance(lr, float) and 1e-4 <= lr <= 1e-1 for lr in rates)
    assert len(set(rates)) == len(rates)  # drawn from a continuum, not a list
    assert all(h["batch_size"] in range(20, 71, 5) for h in trials)
    assert results["best"]["val_accuracy"] is not None
