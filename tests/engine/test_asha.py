"""scheduler=asha: the promotion rule against the ASHA paper's algorithm, the budget, and the
driver's asynchronous loop on a fake trainer (promotions, continuation, resume)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from packexp.errors import ConfigError
from packexp.events import MemberScored
from packexp.runner import PackedSearch
from packexp.runner.journal import Journal
from packexp.runner.study import Study
from packexp.samplers import Sampler
from packexp.samplers.tpe import TpeSampler
from packexp.schedulers import Asha, AshaState, Hyperband, promotable
from packexp.testing.asha import assert_promotions_follow_the_rule, get_job
from packexp.testing.fake_trainer import (
    SPACE,
    FakeTrainer,
    fake_search,
    outcome,
)


def jobs_in_a_row(rungs, promoted, eta):
    """get_job called until it draws a new configuration: the promotions, in its order."""
    promoted = [set(p) for p in promoted]
    out = []
    while (job := get_job(rungs, promoted, eta)) is not None:
        out.append(job)
    return out


@pytest.mark.parametrize("rungs, promoted, eta, expected", [
    # Three results at rung 0: floor(3/3) = 1 is promotable, the best.
    ([[("a", .5), ("b", .9), ("c", .1)], []], [set()], 3, [("b", 1)]),
    # Two results: floor(2/3) = 0; nothing yet, however good.
    ([[("a", .5), ("b", .9)], []], [set()], 3, []),
    # b went up at three results; at six, the top two are d and b: only d is new.
    ([[("a", .5), ("b", .9), ("c", .1), ("d", .95), ("e", .2), ("f", .3)], []], [{"b"}], 3,
     [("d", 1)]),
    # b went up at three results and has since fallen out of the top two (e, d): both go up,
    # best first; b, promoted once, stays so.
    ([[("a", .5), ("b", .9), ("c", .1), ("d", .95), ("e", .97), ("f", .3)], []], [{"b"}], 3,
     [("e", 1), ("d", 1)]),
    # The higher rung first: rung 1's top third (b) before rung 0's (e).
    ([[("a", .5), ("b", .9), ("c", .1), ("d", .95), ("e", .97), ("f", .3)],
      [("b", .7), ("d", .6), ("x", .1)], []], [{"b", "d"}, set()], 3, [("b", 2), ("e", 1)]),
    # eta = 2: half of each rung; equal scores keep arrival order.
    ([[("a", .5), ("b", .5), ("c", .5), ("d", .1)], []], [set()], 2, [("a", 1), ("b", 1)]),
    # The top rung promotes nothing.
    ([[("a", .5)], [("a", .6), ("b", .7), ("c", .8)]], [set(), set()], 3, []),
])
def test_promotable_is_what_the_papers_get_job_promotes_in_a_row(rungs, promoted, eta,
                                                                   expected):
    assert jobs_in_a_row(rungs, promoted, eta) == expected
    assert promotable(rungs, promoted, eta) == expected


def test_promotable_agrees_with_get_job_on_random_histories():
    rng = random.Random(0)
    for _ in range(300):
        eta = rng.choice([2, 3, 4])
        depth = rng.randint(2, 4)
        rungs = [[(f"t{k}-{i}", round(rng.random(), 1)) for i in range(rng.randint(0, 12))]
                 for k in range(depth)]
        promoted = [{t for t, _ in rung if rng.random() < 0.2} for rung in rungs[:-1]]
        assert promotable(rungs, promoted, eta) == jobs_in_a_row(rungs, promoted, eta)


def test_failed_trials_rank_last_and_are_never_promoted():
    nan = float("nan")
    assert promotable([[("a", None), ("b", nan), ("c", .1)], []], [set()], 3) == [("c", 1)]
    assert promotable([[("a", None), ("b", nan), ("c", None)], []], [set()], 3) == []


def test_rungs_grow_by_eta_from_min_r_and_end_at_R():
    assert Asha(27, 3).rungs == [1, 3, 9, 27]
    assert Asha(10, 3).rungs == [1, 3, 9, 10]
    assert Asha(27, 3, min_r=3).rungs == [3, 9, 27]
    assert Asha(9, 3, min_r=9).rungs == [9]
    assert [Asha(9, 3).cost(k) for k in range(3)] == [1, 2, 6]
    assert [Asha(9, 3, continue_on_promotion=False).cost(k) for k in range(3)] == [1, 3, 9]


@pytest.mark.parametrize("R, continued", [(9, True), (27, True), (27, False)])
def test_the_default_budget_is_what_hyperband_trains(R, continued):
    hyperband = Hyperband(R, 3, continued)
    assert Asha(R, 3, continue_on_promotion=continued).max_epochs == sum(
        hyperband.epochs(b) for b in hyperband.brackets())


def test_the_budget_bounds_promotions_and_new_configurations():
    asha = Asha(9, 3, max_epochs=10, num_configs=7)
    state = AshaState(asha)
    assert state.new_configs(8) == 7  # num_configs first
    state.plan(0, [f"t{i}" for i in range(7)], drawn=7)
    for i in range(7):
        state.record(f"t{i}", 0, i / 10)
    assert state.new_configs(8) == 0
    # 7 epochs spent: t6 and t5 (the top two of seven) cost 2 each; only one fits in 10.
    assert state.promotions() == [("t6", 1)]
    state.plan(1, ["t6"])
    assert state.spent == 9 and state.promotions() == [] and state.new_configs(8) == 0


@pytest.mark.parametrize("override, message", [
    ("scheduler.min_r=0", "scheduler.min_r=0: must be a number of epochs in (0, R=9]"),
    ("scheduler.min_r=10", "scheduler.min_r=10: must be a number of epochs in (0, R=9]"),
    ("scheduler.eta=1", "scheduler.eta=1: must be an integer >= 2"),
    ("scheduler.num_configs=0", "scheduler.num_configs=0: must be null or an integer >= 1"),
    ("scheduler.max_epochs=0.5", "scheduler.max_epochs=0.5: must be null or at least min_r=1"),
    ("scheduler.sample_size=true", "scheduler.sample_size=True: must be null or an integer"),
])
def test_bad_settings_are_one_line_naming_the_key(override, message):
    from packexp.config import instantiate
    from packexp.testing.config import compose_config

    cfg = compose_config(["scheduler=asha", override])
    with pytest.raises(ConfigError) as error:
        instantiate(cfg.scheduler, "scheduler")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


# The driver's loop, on packexp.testing's fake trainer (score: x / 100).

ASHA = Asha(9, 3, sample_size=3)  # rungs of 1, 3, 9 epochs; 69 epochs, Hyperband's


def asha_search(run_dir: Path, fake_trainer: FakeTrainer, sampler: Sampler | None = None,
                asha: Asha = ASHA) -> PackedSearch:
    return fake_search(run_dir, fake_trainer, asha.brackets(), sampler=sampler)


def to_the_end(search: PackedSearch, asha: Asha = ASHA) -> PackedSearch:
    search.run(asha)
    search.finish()
    return search


def test_asha_spends_the_budget_and_promotes_only_the_top_third_so_far(tmp_path, fake_trainer):
    search = to_the_end(asha_search(tmp_path, fake_trainer))
    records = Journal(tmp_path).read()
    assert_promotions_follow_the_rule(records, 3, 3)
    spent = sum(ASHA.cost(rung) for t in search.trials.values() for rung in range(len(t.rungs)))
    assert ASHA.max_epochs - 1 < spent <= ASHA.max_epochs == 69
    assert spent == sum(p.epochs_spent for p in search.packs)
    status = {i: t.status for i, t in search.trials.items()}
    assert {i for i, s in status.items() if s == "finished"} == {
        i for i, t in search.trials.items() if len(t.rungs) == 3}
    assert set(status.values()) == {"finished", "killed"}
    assert search.listeners.listeners[0].ended == status
    assert not list((tmp_path / "checkpoints").rglob("*.json"))  # all retired
    # Promotions go first: no new configuration is drawn while one is ready.
    assert len(search.trials) == sum(len(r["sampled"]) for r in records if r["event"] == "plan")


def test_a_promoted_trial_continues_from_the_state_its_rung_left(tmp_path, fake_trainer):
    to_the_end(asha_search(tmp_path, fake_trainer))
    left: dict[str, object] = {}
    continued = 0
    for call in fake_trainer.calls:
        for i in call["ids"]:
            assert call["states"][i] == left.get(i)  # None at a trial's first rung
            continued += call["states"][i] is not None
        left.update(call["returned"])
    assert continued > 0


def test_one_worker_trains_in_the_order_it_plans(tmp_path, fake_trainer):
    search = to_the_end(asha_search(tmp_path, fake_trainer))
    plans = [r for r in Journal(tmp_path).read() if r["event"] == "plan"]
    assert [p["key"] for p in plans] == [f"a{j:03d}-r{p['rung']}" for j, p in enumerate(plans)]
    trained = [i for c in fake_trainer.calls for i in c["ids"]]
    # Each pack is one of the journaled plan's, named by it.
    assert sorted(p.pack_id for p in search.packs) == sorted(
        f"{p['key']}-p{j:02d}" for p in plans for j in range(len(p["packs"])))
    assert len(trained) == sum(len(t.rungs) for t in search.trials.values())


@pytest.mark.parametrize("sampler", [Sampler(), TpeSampler(random_fraction=0.0, min_points=3)],
                         ids=["random", "tpe"])
@pytest.mark.parametrize("die_at_call", [1, 6, 15])
def test_a_resumed_asha_search_ends_as_the_unbroken_one(tmp_path, fake_trainer, die_at_call,
                                                         sampler):
    whole = to_the_end(asha_search(tmp_path / "whole", fake_trainer, sampler))
    everything = fake_trainer.trained()
    fake_trainer.die_at_call, fake_trainer.calls = die_at_call, []
    with pytest.raises(KeyboardInterrupt):
        to_the_end(asha_search(tmp_path / "killed", fake_trainer, sampler))
    records = Journal(tmp_path / "killed").read()
    fake_trainer.die_at_call, fake_trainer.calls = None, []
    resumed = asha_search(tmp_path / "killed", fake_trainer, sampler)  # replays its journal
    to_the_end(resumed)
    journaled = [(r["trial_id"], r["epochs"]) for r in records if r["event"] == "result"]
    assert not set(journaled) & set(fake_trainer.trained())  # nothing trained twice
    assert sorted(journaled + fake_trainer.trained()) == sorted(everything)
    assert {i: t.hparams for i, t in resumed.trials.items()} == {
        i: t.hparams for i, t in whole.trials.items()}
    assert outcome(resumed) == outcome(whole)
    assert [p.pack_id for p in resumed.packs] == [p.pack_id for p in whole.packs]
    assert resumed.best() == whole.best()


def test_tpe_under_asha_learns_from_the_results_so_far(tmp_path, fake_trainer):
    tpe = TpeSampler(random_fraction=0.0, min_points=3)
    learned = to_the_end(asha_search(tmp_path / "tpe", fake_trainer, tpe))
    at_random = to_the_end(asha_search(tmp_path / "random", fake_trainer))
    first = {f"t{i:04d}" for i in range(ASHA.sample_size)}  # drawn before any result
    assert all(learned.trials[i].hparams == at_random.trials[i].hparams for i in first)
    later = [t.hparams["x"] for i, t in learned.trials.items() if i not in first]
    chance = [t.hparams["x"] for i, t in at_random.trials.items() if i not in first]
    assert sum(later) / len(later) > sum(chance) / len(chance)  # higher x scores higher


# On TensorFlow, through the command line's job: MLflow, task=plan.

@pytest.mark.tf
def test_an_asha_search_is_tracked_and_summarised_like_hyperbands(tmp_path):
    import json

    from mlflow.tracking import MlflowClient
    from omegaconf import open_dict

    from packexp.app.main import run
    from packexp.testing.config import compose_config

    cfg = compose_config(["experiment=quick", "scheduler=asha", "tracking=mlflow",
                          "strategy=knn", "scheduler.sample_size=4", "pack.fusion=auto"])
    with open_dict(cfg):
        cfg.tracking.store_dir = str(tmp_path / "store")
    best = run(cfg, run_dir=tmp_path / "run")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    asha = Asha(cfg.scheduler.R, cfg.scheduler.eta)
    assert (results["scheduler"], results["workers"]["workers"]) == ("asha", 1)
    assert any(p["fused"] for p in results["packs"])  # ASHA over fused packs
    assert asha.max_epochs - 1 < results["epochs_spent"] <= asha.max_epochs
    assert 0 <= results["workers"]["idle_fraction"] < 1
    assert best == results["best"]["val_accuracy"] == results["anytime"][-1]["best"]
    finished = [t for t in results["trials"] if t["status"] == "finished"]
    assert finished and all(len(t["rungs"]) == len(asha.rungs) for t in finished)

    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(best)
    assert len(runs) - 1 == len(results["trials"])
    plans = {a.path for a in client.list_artifacts(parent.info.run_id, "packing")}
    assert "packing/a000-r0.json" in plans and len(plans) == len(
        {p["pack_id"].rsplit("-p", 1)[0] for p in results["packs"]})


@pytest.mark.tf
def test_task_plan_shows_ashas_rungs_budget_and_first_packs(tmp_path, capsys):
    import json

    from packexp.app.main import run
    from packexp.testing.config import compose_config

    cfg = compose_config(["task=plan", "scheduler=asha", "scheduler.R=27", "tracking=none",
                          "strategy=knn"])
    run(cfg, run_dir=tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["asynchronous"] and plan["rungs_epochs"] == [1, 3, 9, 27]
    assert plan["max_epochs"] == 357  # Hyperband's at R=27
    [bracket] = plan["brackets"]
    assert sorted(t for p in bracket["first_rung_packs"] for t in p) == [
        f"t{i:04d}" for i in range(8)]
    assert "ASHA R=27" in capsys.readouterr().out
    assert not (tmp_path / "journal.jsonl").exists()
    # Five configurations in all: the first plan draws five, and none is expected at R.
    run(compose_config(["task=plan", "scheduler=asha", "scheduler.num_configs=5",
                        "tracking=none", "strategy=knn"]), run_dir=tmp_path / "five")
    plan = json.loads((tmp_path / "five" / "plan.json").read_text())
    [bracket] = plan["brackets"]
    assert sum(len(p) for p in bracket["first_rung_packs"]) == 5
    assert [r["n"] for r in bracket["rungs"]] == [5, 1, 0]


@pytest.mark.parametrize("scheduler, shown", [
    (ASHA, ["ASHA: pack a", "69/69 epochs"]),
    (Hyperband(9, 3), ["bracket 1/3 (s=2) rung 0 to 1 epochs", "/5 packs"])])
def test_the_progress_display_counts_ashas_epochs_and_hyperbands_packs(tmp_path, fake_trainer,
                                                                         scheduler, shown):
    import io

    from rich.console import Console

    from packexp.listeners import SearchProgress

    out = io.StringIO()
    search = asha_search(tmp_path, fake_trainer, asha=scheduler)
    with SearchProgress(scheduler, Console(file=out, force_terminal=True, width=120)) as bar:
        search.listeners.listeners.append(bar)
        search.run(scheduler)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without the colours
    assert all(s in text for s in shown), text


def test_a_diverged_member_is_never_promoted_and_ends_failed(tmp_path, fake_trainer, monkeypatch):
    fake_trainer.failing = "t0001"
    search = to_the_end(asha_search(tmp_path, fake_trainer))
    failing = search.trials["t0001"]
    assert failing.status == "failed" and len(failing.rungs) == 1
    assert failing.rungs[0].val_accuracy is None and failing.rungs[0].checkpoint is None
    assert all("t0001" not in c["ids"] for c in fake_trainer.calls[1:] if c["epochs"] > 1)


def test_trials_no_budget_can_promote_end_before_the_search_does(tmp_path, fake_trainer,
                                                                   monkeypatch):
    """Once a promotion from rung k costs more than the epochs left, rung k's trials are
    retired and their checkpoints deleted while the search goes on."""
    on_disk = []
    original = fake_trainer.train_group

    def train_group(group, *args, **kwargs):
        on_disk.append(({t.trial_id for t in group},
                        {p.parent.name for p in (tmp_path / "checkpoints").rglob("*.json")}))
        return original(group, *args, **kwargs)

    monkeypatch.setattr(fake_trainer, "train_group", train_group)
    search = to_the_end(asha_search(tmp_path, fake_trainer))
    members, files = on_disk[-1]
    assert files <= members  # only the last pack's own states are kept
    ended_early = {i for i, t in search.trials.items() if t.status == "killed"}
    assert ended_early


def test_a_search_killed_between_two_members_results_resumes_as_the_unbroken_one(
        tmp_path, fake_trainer, monkeypatch):
    """The pack's first member is journaled, its pack record is not: the resumed run trains
    the whole pack again, so its promotions and numbers are the unbroken run's."""
    whole = to_the_end(asha_search(tmp_path / "whole", fake_trainer))
    seen = []
    original = Study.write

    def write(self, event):
        original(self, event)
        if not isinstance(event, MemberScored):
            return
        seen.append(event.result.trial_id)
        first_of_two = len(event.pack.members) > 1 and event.pack.members[0] == seen[-1]
        if len(seen) > 6 and first_of_two:
            raise KeyboardInterrupt

    monkeypatch.setattr(Study, "write", write)
    with pytest.raises(KeyboardInterrupt):
        to_the_end(asha_search(tmp_path / "killed", fake_trainer))
    monkeypatch.setattr(Study, "write", original)
    records = Journal(tmp_path / "killed").read()
    assert records[-1]["event"] == "result"  # killed between a pack's results
    resumed = asha_search(tmp_path / "killed", fake_trainer)  # replays its journal
    to_the_end(resumed)
    assert outcome(resumed) == outcome(whole)
    assert [p.pack_id for p in resumed.packs] == [p.pack_id for p in whole.packs]
    assert sum(p.epochs_spent for p in resumed.packs) == sum(p.epochs_spent
                                                             for p in whole.packs)


def test_a_workers_killed_attempt_keeps_the_checkpoints_the_journal_names(tmp_path):
    """A resumed pack that comes back deletes its earlier attempts' files, but not those of
    members whose results the journal holds (a later promotion continues from them)."""
    pytest.importorskip("ray")
    from packexp.executors.base import drop_other_attempts
    from packexp.executors.ray import RayExecutor

    executor = RayExecutor(None, tmp_path)
    old, new = (tmp_path / "attempts" / f"a003-r0-p00.{tag}" for tag in ("aaaa", "bbbb"))
    for folder, names in ((old, ("t0009", "t0010")), (new, ("t0009",))):
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.npz").write_bytes(b"state")
    executor.discard({str(old / "t0010.npz"), str(new / "t0009.npz")})
    drop_other_attempts(tmp_path / "attempts", "a003-r0-p00", {new.name}, executor._journaled)
    assert sorted(p.name for p in (tmp_path / "attempts").rglob("*.npz")) == [
        "t0009.npz", "t0010.npz"]
    assert not (old / "t0009.npz").exists() and (old / "t0010.npz").exists()


@pytest.mark.parametrize("sampler", [Sampler(), TpeSampler(random_fraction=0.0, min_points=3)],
                         ids=["random", "tpe"])
def test_asha_draws_no_configuration_twice_while_the_grid_has_others(tmp_path, fake_trainer,
                                                                   sampler):
    asha = Asha(27, 3, sample_size=4)
    search = to_the_end(asha_search(tmp_path, fake_trainer, sampler, asha), asha)
    drawn = [tuple(sorted(t.hparams.items())) for _, t in sorted(search.trials.items())]
    assert len(drawn) > SPACE.size  # the grid ran out: from then on, used ones come again
    first = drawn[:int(SPACE.size)]
    assert len(set(first)) == len(first)


@pytest.mark.parametrize("eta", [2, 3, 4])
def test_the_ranked_rungs_promote_as_promotable_ranks_every_result_again(eta):
    """``AshaState`` keeps each rung ranked as results arrive; on random histories (ties,
    failed results, promotions between results) it promotes exactly what ``promotable``
    finds ranking every result again, and each trial below a closed rung is retired once."""
    promoted = 0
    for seed in range(60):
        draw = random.Random(seed)
        asha = Asha(27, eta, max_epochs=draw.choice([40, 80, 10_000]))
        state = AshaState(asha)
        ids = iter(f"t{i}" for i in range(10_000))
        retired: list[str] = []
        for _ in range(draw.randint(5, 80)):
            ready = state.promotions()
            expected, spent = [], state.spent
            for trial_id, rung in promotable(state.results, state.planned[1:], eta):
                if spent + asha.cost(rung) <= asha.max_epochs + 1e-9:
                    expected.append((trial_id, rung))
                    spent += asha.cost(rung)
            assert ready == expected, seed
            if ready and draw.random() < 0.5:
                rung = ready[0][1]
                state.plan(rung, [t for t, k in ready if k == rung][:draw.randint(1, 3)])
                promoted += 1
            elif state.new_configs(3):
                state.plan(0, [next(ids) for _ in range(state.new_configs(3))], drawn=3)
            waiting = [(t, k) for k, planned in enumerate(state.planned) for t in planned
                       if t not in {u for u, _ in state.results[k]}]
            for trial_id, rung in draw.sample(waiting, min(len(waiting), 2)):
                score = draw.choice([None, float("nan"), *(round(draw.random(), 1),) * 4])
                state.record(trial_id, rung, score)
            for k in range(state.top):
                retired += state.closed(k)
        assert len(retired) == len(set(retired)), seed
    assert promoted > 100  # the histories promote: the comparison is not of empty lists
