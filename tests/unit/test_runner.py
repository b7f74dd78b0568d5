"""The search a scheduler drives (``packexp/runner/``) on a fake pack trainer: plans journaled
first, replay, states, checks, best."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from packexp.errors import ConfigError
from packexp.records.record import RungResult
from packexp.runner import PackedSearch
from packexp.runner.journal import Journal
from packexp.samplers import Sampler
from packexp.samplers.tpe import TpeSampler
from packexp.space import Trial
from packexp.space.options import steps_for
from packexp.strategies import Capacity, Strategy, check_fits, check_partition
from packexp.strategies.none import NoneStrategy
from packexp.testing.fake_trainer import (
    HYPERBAND,
    SPACE,
    TRAIN_SIZE,
    FakeTrainer,
    State,
    fake_search,
    outcome,
)

FAILING = FakeTrainer().failing  # the member the fake trainer diverges


class Dropping(Strategy):
    """Breaks the contract: leaves the last trial out."""

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        return [[t] for t in trials[:-1]]


def new_search(run_dir: Path, fake_trainer: FakeTrainer, strategy: Strategy | None = None,
               continue_on_promotion: bool = True, sampler: Sampler | None = None
               ) -> PackedSearch:
    return fake_search(run_dir, fake_trainer, strategy=strategy,
                       continue_on_promotion=continue_on_promotion, sampler=sampler)


def search_to_the_end(search: PackedSearch) -> PackedSearch:
    search.run(HYPERBAND)
    search.finish()
    return search


def rung_result(trial_id: str, epochs: float = 1.0, val_accuracy: float | None = 0.5,
                checkpoint: str | None = None) -> RungResult:
    return RungResult(trial_id, 1, 0, epochs, 10, val_accuracy, 0.5, 0.1, "p", checkpoint)


def test_each_pack_trains_only_after_its_rung_plan_is_journaled(tmp_path, fake_trainer):
    search_to_the_end(new_search(tmp_path, fake_trainer))
    assert len(fake_trainer.calls) == 14  # 5 + 2 + 1, 3 + 1, 2 packs of at most two
    for call in fake_trainer.calls:
        plan = [r for r in call["journal"] if r["event"] == "plan"][-1]
        assert call["ids"] in plan["packs"]
        done = {r["trial_id"] for r in call["journal"] if r["event"] == "result"
                and (r["bracket"], r["rung"]) == (plan["bracket"], plan["rung"])}
        assert not done & set(call["ids"])
    plans = [r for r in Journal(tmp_path).read() if r["event"] == "plan"]
    assert [(p["bracket"], p["rung"]) for p in plans] == [(2, 0), (2, 1), (2, 2), (1, 0), (1, 1),
                                                          (0, 0)]
    assert plans[0]["packs"] == [["b2-t000", "b2-t001"], ["b2-t002", "b2-t003"],
                                 ["b2-t004", "b2-t005"], ["b2-t006", "b2-t007"], ["b2-t008"]]
    assert plans[0]["fusion"] == [None] * 5


def test_every_member_rung_is_journaled_and_recorded(tmp_path, fake_trainer):
    search = search_to_the_end(new_search(tmp_path, fake_trainer))
    results = [r for r in Journal(tmp_path).read() if r["event"] == "result"]
    assert len(results) == 9 + 3 + 1 + 5 + 1 + 3
    assert sorted((r["trial_id"], r["rung"]) for r in results) == sorted(
        (i, r.rung) for i, t in search.trials.items() for r in t.rungs)
    packs = [r["pack"]["pack_id"] for r in Journal(tmp_path).read() if r["event"] == "pack"]
    assert packs == [p.pack_id for p in search.packs] and len(set(packs)) == 14
    assert packs[:3] == ["b2-r0-p00", "b2-r0-p01", "b2-r0-p02"]


def test_trials_end_killed_failed_or_finished_and_leave_no_checkpoints(tmp_path, fake_trainer):
    search = search_to_the_end(new_search(tmp_path, fake_trainer))
    status = {i: t.status for i, t in search.trials.items()}
    assert search.listeners.listeners[0].ended == status
    for trial_id, t in search.trials.items():
        rungs = len(t.rungs)
        if trial_id == FAILING:
            assert status[trial_id] == "failed"
        elif rungs == len(HYPERBAND.bracket(t.bracket).rungs):
            assert status[trial_id] == "finished"
        else:
            assert status[trial_id] == "killed"
    assert set(status.values()) == {"killed", "failed", "finished"}
    assert not list((tmp_path / "checkpoints").rglob("*.json"))


def test_promoted_trials_continue_from_the_state_their_last_rung_left(tmp_path, fake_trainer):
    search_to_the_end(new_search(tmp_path, fake_trainer))
    left: dict[str, State] = {}
    for call in fake_trainer.calls:
        # The very objects the trainer returned last rung (None at a trial's first rung).
        assert {i: call["states"].get(i, "absent") for i in call["ids"]} == {
            i: left.get(i) for i in call["ids"]}
        assert all(call["states"][i] is left[i] for i in call["ids"] if i in left)
        left.update(call["returned"])
    assert sum(s is not None for c in fake_trainer.calls for s in c["states"].values()) == 3 + 1 + 1
    assert fake_trainer.reads == []  # the checkpoints are for a resume; the next rung reads memory


def test_without_continuation_every_rung_starts_afresh_and_writes_no_checkpoint(tmp_path,
                                                                              fake_trainer):
    search = search_to_the_end(new_search(tmp_path, fake_trainer, continue_on_promotion=False))
    assert all(s is None for c in fake_trainer.calls for s in c["states"].values())
    assert all(r.checkpoint is None for t in search.trials.values() for r in t.rungs)
    assert not (tmp_path / "checkpoints").exists()


def records_of(run_dir: Path, event: str) -> list[dict]:
    return [r for r in Journal(run_dir).read() if r["event"] == event]


def kill_then_resume(tmp_path: Path, fake_trainer: FakeTrainer, die_at_call: int,
                     strategy: Strategy | None = None, sampler: Sampler | None = None
                     ) -> tuple[PackedSearch, list[dict]]:
    fake_trainer.die_at_call, fake_trainer.calls = die_at_call, []
    with pytest.raises(KeyboardInterrupt):
        search_to_the_end(new_search(tmp_path, fake_trainer, sampler=sampler))
    records = Journal(tmp_path).read()
    fake_trainer.die_at_call, fake_trainer.calls = None, []
    resumed = new_search(tmp_path, fake_trainer, strategy, sampler=sampler)
    assert resumed.replayed.members == sum(r["event"] == "result" for r in records)
    return search_to_the_end(resumed), records


@pytest.mark.parametrize("die_at_call", [2, 5, 9])  # inside rung 0, at rung 1, in bracket 1
def test_a_resumed_search_trains_only_what_the_journal_lacks_and_ends_the_same(
        tmp_path, fake_trainer, die_at_call):
    whole = search_to_the_end(new_search(tmp_path / "whole", fake_trainer))
    everything = fake_trainer.trained()
    resumed, records = kill_then_resume(tmp_path / "killed", fake_trainer, die_at_call)
    journaled = [(r["trial_id"], r["epochs"]) for r in records if r["event"] == "result"]
    assert journaled and not set(journaled) & set(fake_trainer.trained())
    assert sorted(journaled + fake_trainer.trained()) == sorted(everything)
    leave_out = ("checkpoint", "pack_id")  # see the next test
    assert outcome(resumed, leave_out) == outcome(whole, leave_out)
    assert resumed.best() == whole.best()
    plans = [(r["bracket"], r["rung"]) for r in Journal(tmp_path / "killed").read()
             if r["event"] == "plan"]
    assert len(plans) == len(set(plans)) == 6  # an interrupted rung is not planned again


@pytest.mark.parametrize("die_at_call", [2, 9])  # inside bracket 2's rung 0, bracket 1's
def test_a_resumed_run_names_its_packs_as_an_unbroken_one_does(tmp_path, fake_trainer, die_at_call):
    whole = search_to_the_end(new_search(tmp_path / "whole", fake_trainer))
    resumed, _ = kill_then_resume(tmp_path / "killed", fake_trainer, die_at_call)
    assert [p.pack_id for p in resumed.packs] == [p.pack_id for p in whole.packs]
    assert outcome(resumed) == outcome(whole)


@pytest.mark.parametrize("die_at_call", [5, 9])  # at bracket 2's rung 1, in bracket 1
def test_a_sampler_that_learns_samples_a_resumed_run_as_the_unbroken_one(tmp_path, fake_trainer,
                                                                          die_at_call):
    tpe = TpeSampler(random_fraction=0.0, min_points=3)
    whole = search_to_the_end(new_search(tmp_path / "whole", fake_trainer, sampler=tpe))
    resumed, _ = kill_then_resume(tmp_path / "killed", fake_trainer, die_at_call, sampler=tpe)
    assert {i: t.hparams for i, t in resumed.trials.items()} == {
        i: t.hparams for i, t in whole.trials.items()}
    assert outcome(resumed) == outcome(whole)
    at_random = search_to_the_end(new_search(tmp_path / "random", fake_trainer))
    drawn = {i: t.hparams for i, t in whole.trials.items()}
    assert drawn != {i: t.hparams for i, t in at_random.trials.items()}  # the model drew
    assert all(t.hparams == at_random.trials[i].hparams  # the first bracket knows nothing
               for i, t in whole.trials.items() if t.bracket == 2)


def test_a_resumed_trial_continues_from_its_checkpoint(tmp_path, fake_trainer):
    kill_then_resume(tmp_path, fake_trainer, die_at_call=5)  # bracket 2's rung 0 done
    checkpoints = {r["trial_id"]: r["checkpoint"] for r in records_of(tmp_path, "result")
                   if (r["bracket"], r["rung"]) == (2, 0)}
    rung_1 = [c for c in fake_trainer.calls if c["ids"][0].startswith("b2-") and c["epochs"] == 3]
    promoted = [i for c in rung_1 for i in c["ids"]]
    assert len(promoted) == 3
    assert sorted(fake_trainer.reads) == sorted(checkpoints[i] for i in promoted)
    for call in rung_1:
        assert call["states"] == {i: State(i, steps_for(1, 10, TRAIN_SIZE)) for i in call["ids"]}


def test_an_interrupted_rung_keeps_its_journaled_packs_whatever_the_strategy_says(tmp_path,
                                                                                   fake_trainer):
    kill_then_resume(tmp_path, fake_trainer, die_at_call=2, strategy=NoneStrategy())
    # Packs p00 and p01 were done; the rest of rung 0 trains as journaled, in pairs; the
    # rungs after it follow the strategy of the resumed session: singletons.
    assert [c["ids"] for c in fake_trainer.calls[:3]] == [["b2-t004", "b2-t005"],
                                                    ["b2-t006", "b2-t007"], ["b2-t008"]]
    assert all(len(c["ids"]) == 1 for c in fake_trainer.calls[3:])


def test_a_strategy_that_loses_a_trial_stops_the_rung_before_anything_is_journaled(tmp_path,
                                                                                   fake_trainer):
    search = new_search(tmp_path, fake_trainer, strategy=Dropping())
    with pytest.raises(RuntimeError, match="each trial exactly once"):
        search_to_the_end(search)
    assert fake_trainer.calls == []
    assert [r["event"] for r in Journal(tmp_path).read()] == ["start"]


def trials(n: int, batch_size: int = 10) -> list[Trial]:
    return [Trial(f"t{i}", {"x": i, "batch_size": batch_size}, (float(i),)) for i in range(n)]


@pytest.mark.parametrize(("packs", "match"), [
    ([[0, 1], [2]], "each trial exactly once"),          # t3 left out
    ([[0, 1], [2, 3], [3]], "each trial exactly once"),  # t3 twice
    ([[0, 1], [2, 3, 4]], "each trial exactly once"),    # t4 is not in the rung
    ([[0, 1, 2], [3]], "over capacity"),
])
def test_check_partition_refuses_a_broken_plan(packs, match):
    ts = trials(5)
    with pytest.raises(RuntimeError, match=match):
        check_partition(ts[:4], [[ts[i] for i in p] for p in packs], Capacity.members(2))


def test_check_partition_leaves_a_lone_member_over_capacity_to_check_fits():
    ts = trials(2)
    costly = Capacity(limit=2**20, cost=lambda t: 3 * 2**20 if t.trial_id == "t1" else 2**19)
    check_partition(ts, [[ts[0]], [ts[1]]], costly)
    with pytest.raises(ConfigError, match=r"^device\.memory_budget_mb: 1\.00 MB is smaller than "
                                          r"one member \(t1, batch 10, needs 3\.0 MB\)$"):
        check_fits(ts, costly, "device.memory_budget_mb")


def test_best_is_the_highest_score_then_the_most_epochs(tmp_path, fake_trainer):
    search = new_search(tmp_path, fake_trainer)
    assert search.best() is None

    def record(trial_id: str, *rungs: tuple[float, float | None]) -> None:
        search.study.add_trials(1, [Trial(trial_id, {"x": trial_id}, ())])
        for e, a in rungs:
            search.study.restore(rung_result(trial_id, e, a))

    record("a", (1, None))
    assert search.best() is None  # a failed rung scores nothing
    record("b", (1, 0.5), (3, 0.75))
    record("c", (1, 0.75), (3, 0.5), (9, 0.75))
    record("d", (3, 0.25))
    assert search.best().to_dict() == {"trial_id": "c", "hparams": {"x": "c"},
                                       "val_accuracy": 0.75, "epochs": 9,
                                       "metric": "val_accuracy", "value": 0.75,
                                       "val_loss": 0.5, "train_loss": 0.1}  # its rung's


def test_the_search_scores_the_best_trial_at_its_last_rung(tmp_path, fake_trainer):
    search = search_to_the_end(new_search(tmp_path, fake_trainer))
    scored = [(r.val_accuracy, r.epochs, i) for i, t in search.trials.items()
              for r in t.rungs if r.val_accuracy is not None]
    top = max(scored)
    best = search.best()
    assert (best.val_accuracy, best.epochs) == top[:2]
    assert (best.val_accuracy, best.epochs, best.trial_id) in scored
    assert best.epochs == search.trials[best.trial_id].rungs[-1].epochs


@pytest.mark.parametrize("horizon", [None, 9.0])
def test_every_pack_gets_the_searchs_lr_horizon(tmp_path, fake_trainer, horizon):
    """None (lr_horizon=rung): each pack's schedules end at its rung's epochs; 9.0
    (lr_horizon=trial): at R, whatever the rung."""
    search = fake_search(tmp_path, fake_trainer, lr_horizon=horizon)
    search_to_the_end(search)
    assert fake_trainer.calls and all(c["lr_horizon"] == horizon for c in fake_trainer.calls)


@pytest.mark.parametrize("continued", [True, False])
def test_anytime_results_count_every_epoch_trained_once_and_never_lose_the_best(
        tmp_path, fake_trainer, continued):
    from packexp.records.results import anytime

    search = search_to_the_end(new_search(tmp_path, fake_trainer, continue_on_promotion=continued))
    points = anytime(search.trials.values(), search.packs)
    assert [p["pack_id"] for p in points] == [p.pack_id for p in search.packs]
    # Epochs spent: what the brackets train, continued or from scratch (Hyperband.epochs).
    assert points[-1]["epochs"] == pytest.approx(
        sum(HYPERBAND.epochs(b, continued) for b in HYPERBAND.brackets()))
    spent = [p["epochs"] for p in points]
    best = [p["best"] for p in points]
    assert spent == sorted(spent) and best == sorted(best)
    assert best[-1] == search.best().val_accuracy
    first = [search.trials[i] for i in search.packs[0].members if i != FAILING]
    assert best[0] == max(t.hparams["x"] / 100 for t in first)
    totals = search.study.result(wall_time_s=1.0).totals
    assert totals.anytime == points and totals.epochs_spent == points[-1]["epochs"]


@pytest.mark.parametrize("sampler", [Sampler(), TpeSampler(random_fraction=0.0, min_points=3)],
                         ids=["random", "tpe"])
def test_no_bracket_draws_a_configuration_an_earlier_one_drew(tmp_path, fake_trainer, sampler):
    search = search_to_the_end(new_search(tmp_path, fake_trainer, sampler=sampler))
    drawn = [tuple(sorted(t.hparams.items())) for t in search.trials.values()]
    assert len(drawn) < SPACE.size and len(set(drawn)) == len(drawn)


def test_an_interrupt_swallowed_mid_pack_stops_the_search_at_the_next_pack(tmp_path, fake_trainer,
                                                                          monkeypatch):
    """A Ctrl-C whose KeyboardInterrupt a finalizer swallowed while the second pack trained:
    that pack is committed, and the search stops before the third."""
    import signal

    from packexp.runner import signals as interrupts

    train = fake_trainer.train_group

    def swallowing(*args, **kwargs):
        if len(fake_trainer.calls) == 1:
            monkeypatch.setattr(interrupts, "_received", [signal.SIGINT])
        return train(*args, **kwargs)

    monkeypatch.setattr(fake_trainer, "train_group", swallowing)
    with pytest.raises(KeyboardInterrupt):
        search_to_the_end(new_search(tmp_path, fake_trainer))
    assert len(fake_trainer.calls) == 2
    assert len(records_of(tmp_path, "pack")) == 2  # both trained packs are kept
