"""A plan carried out as packs (``packexp/runner/packs.py``'s ``Packer``) on the fake trainer:
a rung's trials packed by the strategy within capacity and checked, the plan journaled before
any pack trains and its packs named, each pack's job with its members' starting states, what
the strategy knows of the rung, and a pack's predicted time."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from packexp.errors import ConfigError
from packexp.events import RungPlanned
from packexp.executors import CacheView
from packexp.runner import PackedSearch
from packexp.runner.journal import Journal
from packexp.runner.keep import KeepModels
from packexp.schedulers.base import Bracket
from packexp.space import Trial
from packexp.space.options import steps_for
from packexp.strategies import Capacity, RungContext, Strategy, WeighsCosts
from packexp.testing.fake_trainer import (
    TRAIN_SIZE,
    FakeTrainer,
    InOrder,
    State,
    fake_search,
)

# Hyperband at R=9 (``fake_search``'s): bracket 2 trains 9 trials to 1 epoch, 3 to 3 and 1
# to 9; bracket 1 then 5 trials to 3 epochs and 1 to 9; bracket 0 3 trials to 9.


def trials(n: int, batch_size: int = 10) -> list[Trial]:
    return [Trial(f"t{i}", {"x": i, "batch_size": batch_size}, (float(i),)) for i in range(n)]


def drawn(search: PackedSearch, n: int) -> tuple[Bracket, list[Trial]]:
    """Bracket 2 of the search, and ``n`` trials it drew for it."""
    bracket, ts = search.brackets[0], trials(n)
    search.study.add_trials(bracket.s, ts)
    return bracket, ts


def ids(groups) -> list[list[str]]:
    return [[t.trial_id for t in g] for g in groups]


class Dropping(Strategy):
    """Breaks the contract: leaves the last trial out."""

    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        return [[t] for t in trials[:-1]]


class Timed(InOrder):
    """Weighs costs: a pack takes a second a member; notes the rung it was told of."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[RungContext] = []

    def prepare(self, device) -> None:
        pass

    def calibration_used(self) -> None:
        return None

    def predict(self, trials: Sequence[Trial], fusion: str | None,
                rung: RungContext) -> float:
        self.told.append(rung)
        return float(len(trials))


def test_a_rung_s_trials_are_packed_by_the_strategy_within_capacity(tmp_path):
    search = fake_search(tmp_path, FakeTrainer())
    bracket, five = drawn(search, 5)
    planned, context = search.packer.pack(five, bracket, 0)
    assert ids(g for g, _ in planned) == [["t0", "t1"], ["t2", "t3"], ["t4"]]  # two a pack
    assert [f for _, f in planned] == [None] * 3
    assert context.steps == {t.trial_id: steps_for(1.0, 10, TRAIN_SIZE) for t in five}
    assert Journal(tmp_path).read()[-1]["event"] == "start"  # packed, not yet planned


def test_a_plan_that_loses_a_trial_or_a_member_too_large_is_refused_before_it_is_journaled(
        tmp_path):
    search = fake_search(tmp_path, FakeTrainer(), strategy=Dropping())
    bracket, five = drawn(search, 5)
    with pytest.raises(RuntimeError, match="each trial exactly once"):
        search.packer.pack(five, bracket, 0)
    costly = dataclasses.replace(search.packer, context=dataclasses.replace(
        search.context, capacity=Capacity(2**20, lambda t: 3 * 2**20),
        settings=dataclasses.replace(search.settings,
                                     capacity_source="device.memory_budget_mb")))
    with pytest.raises(ConfigError, match=r"^device\.memory_budget_mb: 1\.00 MB is smaller "
                                          r"than one member \(t0, batch 10, needs 3\.0 MB\)$"):
        costly.pack(five, bracket, 0)
    assert [r["event"] for r in Journal(tmp_path).read()] == ["start"]


def test_a_rung_s_plan_names_its_packs_by_the_rung_and_a_keyed_plan_s_by_its_key(tmp_path):
    search = fake_search(tmp_path, FakeTrainer())
    bracket, four = drawn(search, 4)
    context = RungContext({})
    packs = [(0, four[:2], None), (1, four[2:], "on")]
    rung = search.packer.queued(None, bracket, 1, packs, context)
    assert [(q.plan, q.index, q.bracket, q.rung, q.ordered) for q in rung] == [
        ("b2-r1", 0, bracket, 1, True), ("b2-r1", 1, bracket, 1, True)]  # in plan order
    assert [(q.job.key, q.job.epochs, q.job.fusion) for q in rung] == [
        ("b2-r1-p00", 3.0, None), ("b2-r1-p01", 3.0, "on")]
    assert ids(q.job.group for q in rung) == [["t0", "t1"], ["t2", "t3"]]
    assert all(q.context is context for q in rung)
    keyed = search.packer.queued("a7", bracket, 0, packs, context)
    assert [(q.plan, q.job.key, q.job.epochs, q.ordered) for q in keyed] == [
        ("a7", "a7-p00", 1.0, False), ("a7", "a7-p01", 1.0, False)]  # committed as they end


def test_a_plan_is_journaled_before_its_packs_train_unless_a_resume_read_it_back(tmp_path):
    search = fake_search(tmp_path, FakeTrainer())
    told = []
    search.packer.emit = lambda event: (search.study.write(event), told.append(event))
    bracket, four = drawn(search, 4)
    packs = [(0, four[:2], None), (1, four[2:], None)]
    queued = search.packer.announce(None, bracket, 0, packs, RungContext({}), sampled=four)
    [plan] = told
    assert isinstance(plan, RungPlanned) and not plan.journaled
    assert (plan.bracket, plan.rung, plan.epochs, plan.key) == (2, 0, 1.0, None)
    assert ids(plan.packs) == [["t0", "t1"], ["t2", "t3"]] and plan.sampled == ()
    record = Journal(tmp_path).read()[-1]
    assert (record["event"], record["packs"]) == ("plan", [["t0", "t1"], ["t2", "t3"]])
    assert [q.job.key for q in queued] == ["b2-r0-p00", "b2-r0-p01"]
    # A resumed plan: told again (its members done before the resume), not journaled again.
    resumed = search.packer.announce(None, bracket, 0, packs[1:], RungContext({}),
                                     done=["t0", "t1"])
    assert told[-1].journaled and told[-1].done == ["t0", "t1"]
    assert [r["event"] for r in Journal(tmp_path).read()] == ["start", "plan"]
    assert [q.job.key for q in resumed] == ["b2-r0-p01"]  # numbered as in the plan
    # A keyed plan carries the configurations it drew, for a resume to draw them again.
    search.packer.announce("a0", bracket, 0, packs, RungContext({}), sampled=four)
    assert told[-1].key == "a0" and told[-1].sampled == four


def test_a_job_carries_its_members_starting_states_and_whether_they_are_needed_again(tmp_path):
    trainer = FakeTrainer(failing="")
    search = fake_search(tmp_path, trainer, lr_horizon=9.0)
    bracket, pair = drawn(search, 2)
    first = search.packer.job("b2-r0-p00", bracket, 0, pair, None)
    assert first.states == {"t0": None, "t1": None}  # fresh
    assert (first.checkpoint, first.lr_horizon, first.epochs) == (True, 9.0, 1.0)
    [run] = trainer.train_group(pair, search.cache, 1.0, first.states)
    search.ledger.commit(bracket, 0, 1.0, first.key, run)
    promoted = search.packer.job("b2-r1-p00", bracket, 1, pair[:1], "on")
    assert promoted.states == {"t0": State("t0", steps_for(1.0, 10, TRAIN_SIZE))}
    assert (promoted.checkpoint, promoted.fusion, promoted.epochs) == (True, "on", 3.0)
    last = search.packer.job("b2-r2-p00", bracket, 2, pair[:1], None)
    assert last.checkpoint is False  # no rung continues from it, and no model is kept
    kept = fake_search(tmp_path / "kept", trainer, keep=KeepModels())  # the best's handed over
    bracket, pair = drawn(kept, 2)
    assert kept.packer.job("b2-r2-p00", bracket, 2, pair[:1], None).checkpoint is True


def test_the_rung_s_context_counts_each_trial_s_steps_left_and_the_trainings_to_come(tmp_path):
    trainer = FakeTrainer(failing="")
    search = fake_search(tmp_path, trainer)
    bracket, pair = drawn(search, 2)
    start = search.packer.rung_context(pair, bracket, 0, search.brackets)
    assert start.steps == {"t0": 10, "t1": 10} and start.checkpoint
    assert start.future_trials == 3 + 1 + (5 + 1) + 3  # this bracket's later rungs, the rest
    job = search.packer.job("b2-r0-p00", bracket, 0, pair, None)
    [run] = trainer.train_group(pair, search.cache, 1.0, job.states)
    search.ledger.commit(bracket, 0, 1.0, job.key, run)
    search.ledger.starts["t1"] = (State("t9", 5), 5)  # t1 continues from a donor's state
    promoted = search.packer.rung_context(pair, bracket, 1, search.brackets)
    assert promoted.steps == {"t0": 30 - 10, "t1": 30 - 5}  # what each has still to train
    assert (promoted.checkpoint, promoted.future_trials) == (True, 1 + 9)
    last = search.packer.rung_context(pair[:1], bracket, 2, search.brackets)
    assert (last.checkpoint, last.future_trials) == (False, 9)
    assert last.structures == 40  # the fake's space: 40 values of x, the batch size runtime
    retrained = fake_search(tmp_path / "again", trainer, continue_on_promotion=False)
    retrained.study.add_trials(bracket.s, pair)
    retrained.ledger.commit(bracket, 0, 1.0, job.key, run)
    again = retrained.packer.rung_context(pair, bracket, 1, retrained.brackets)
    assert again.steps == {"t0": 30, "t1": 30} and not again.checkpoint  # from scratch


def test_only_a_strategy_that_weighs_costs_predicts_and_with_the_caches_as_they_are_now(
        tmp_path, monkeypatch):
    search = fake_search(tmp_path, FakeTrainer())
    bracket, pair = drawn(search, 2)
    job = search.packer.job("b2-r0-p00", bracket, 0, pair, None)
    context = search.packer.rung_context(pair, bracket, 0, ())
    assert search.packer.predict(job, context) is None  # InOrder weighs none
    timed = Timed()
    assert isinstance(timed, WeighsCosts)
    now = CacheView(kept=frozenset({("pack",)}), members={("member",): 2},
                    replayed=frozenset({("fresh",)}))
    weighing = dataclasses.replace(
        search.packer, context=dataclasses.replace(search.context, strategy=timed),
        views=lambda: now)
    assert weighing.predict(job, context) == 2.0
    [told] = timed.told
    assert (told.kept, told.members, told.replayed) == (now.kept, now.members, now.replayed)
    assert told.steps == context.steps and told.future_trials == context.future_trials
