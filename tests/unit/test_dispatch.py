"""Packs sent to workers and committed as they come back (``packexp/runner/dispatch.py``), on
the fake trainer with workers that hand packs back in an order of the test's: a synchronous
rung's packs committed in plan order, an asynchronous plan's as each comes back, a pack split
out of memory part by part; the search's clock started by its first pack; and an interrupt a
finalizer swallowed raised again before the next pack is sent."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from packexp.events import PackStarted
from packexp.executors import LocalExecutor, PackJob
from packexp.runner import PackedSearch
from packexp.runner import signals as interrupts
from packexp.runner.dispatch import Dispatch
from packexp.runner.journal import Journal
from packexp.runner.packs import Queued
from packexp.schedulers.base import Bracket, Rung
from packexp.space import Trial
from packexp.strategies import RungContext
from packexp.testing.fake_trainer import FakeTrainer, InOrder, fake_search

BRACKET = Bracket(0, (Rung(6, 1.0), Rung(2, 3.0)))  # six trials to 1 epoch, two to 3


class Timed(InOrder):
    """Weighs costs: predicts a second a member."""

    def prepare(self, device) -> None:
        pass

    def calibration_used(self) -> None:
        return None

    def predict(self, trials: Sequence[Trial], fusion: str | None,
                rung: RungContext) -> float:
        return float(len(trials))


class InTheirOrder(LocalExecutor):
    """Three workers on the fake trainer; the packs sent come back in the order ``back`` gives
    (their numbers in the order sent). ``split``: each pack comes back in one part per member,
    as one split out of memory does."""

    workers = 3

    def __init__(self, trainer: FakeTrainer, back: list[int], split: bool = False) -> None:
        super().__init__(trainer=trainer)
        self.back, self.split, self.sent = list(back), split, []

    def _dispatch(self, job: PackJob) -> None:
        self.sent.append(job)

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        job = self.sent[self.back.pop(0)]
        parts = [[t] for t in job.group] if self.split else [list(job.group)]
        runs = [run for part in parts for run in self.trainer.train_group(
            part, self.cache, job.epochs, {t.trial_id: job.states[t.trial_id] for t in part})]
        return job, runs, (0.0, 1.0)

    def clock(self) -> float:
        return 7.5


def planned(tmp_path: Path, back: list[int], key: str | None = None, split: bool = False
            ) -> tuple[PackedSearch, Dispatch, list[Queued], list]:
    """A search's first plan of six trials in three packs of two, journaled, and a dispatch
    whose workers hand its packs back in the order ``back`` gives; what it was told."""
    trainer = FakeTrainer(failing="")
    search = fake_search(tmp_path, trainer, brackets=[BRACKET], strategy=Timed(),
                         executor=InTheirOrder(trainer, back, split))
    executor = search.executor
    six = [Trial(f"t{i}", {"x": 10 * i, "batch_size": 10}, (float(i),)) for i in range(6)]
    search.study.add_trials(0, six)
    packs, context = search.packer.pack(six, BRACKET, 0)
    queued = search.packer.announce(key, BRACKET, 0,
                                    [(j, g, f) for j, (g, f) in enumerate(packs)], context)
    told: list = []
    return search, Dispatch(executor, search.ledger, search.packer, told.append,
                            search.clock), queued, told


def committed(run_dir: Path) -> list[str]:
    return [r["pack"]["pack_id"] for r in Journal(run_dir).read() if r["event"] == "pack"]


def test_a_synchronous_rung_is_committed_in_plan_order_whichever_pack_comes_back_first(
        tmp_path):
    search, dispatch, queued, _ = planned(tmp_path, back=[2, 1, 0])  # the last sent first
    for q in queued:
        dispatch.send(q)
    assert list(dispatch.collect()) == []  # p02 is back: it waits for p00 and p01
    assert list(dispatch.collect()) == []
    assert committed(tmp_path) == []
    results = list(dispatch.collect())  # p00 is back: all three, in plan order
    assert [r.trial_id for r in results] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert [r.pack_id for r in results] == ["b0-r0-p00"] * 2 + ["b0-r0-p01"] * 2 + [
        "b0-r0-p02"] * 2
    assert committed(tmp_path) == ["b0-r0-p00", "b0-r0-p01", "b0-r0-p02"]
    assert [p.predicted_s for p in search.study.packs] == [2.0] * 3  # as predicted when sent


def test_an_asynchronous_plan_is_committed_as_each_pack_comes_back(tmp_path):
    _, dispatch, queued, _ = planned(tmp_path, back=[2, 0, 1], key="a0")
    for q in queued:
        dispatch.send(q)
    assert [[r.trial_id for r in dispatch.collect()] for _ in queued] == [
        ["t4", "t5"], ["t0", "t1"], ["t2", "t3"]]
    assert committed(tmp_path) == ["a0-p02", "a0-p00", "a0-p01"]


def test_each_pack_sent_is_told_and_the_first_starts_the_search_s_clock(tmp_path):
    search, dispatch, queued, told = planned(tmp_path, back=[0, 1, 2])
    assert search.clock.first_pack_at is None
    before = time.time()
    dispatch.send(queued[0])
    first, started = search.clock.first_pack_at, search.clock.started
    assert before <= first <= time.time() and started == 7.5  # on the executor's clock
    dispatch.send(queued[1])
    assert (search.clock.first_pack_at, search.clock.started) == (first, started)
    assert search.first_pack_at == first and search.ledger.clock is search.clock  # one clock
    assert told == [PackStarted(0, "b0-r0-p00", queued[0].job.group),
                    PackStarted(1, "b0-r0-p01", queued[1].job.group)]
    assert [job.key for job in search.executor.sent] == ["b0-r0-p00", "b0-r0-p01"]


def test_a_pack_split_out_of_memory_is_committed_part_by_part(tmp_path):
    search, dispatch, queued, _ = planned(tmp_path, back=[0], split=True)
    dispatch.send(queued[0])
    results = dispatch.collect()
    first = next(results)  # the first part's result: committed before the second part is
    assert (first.trial_id, first.pack_id) == ("t0", "b0-r0-p00-0")
    assert committed(tmp_path) == ["b0-r0-p00-0"]
    assert [r.pack_id for r in results] == ["b0-r0-p00-1"]
    assert committed(tmp_path) == ["b0-r0-p00-0", "b0-r0-p00-1"]
    assert [p.predicted_s for p in search.study.packs] == [None, None]  # predicted whole


def test_an_interrupt_a_finalizer_swallowed_is_raised_before_the_next_pack_is_sent(
        tmp_path, monkeypatch):
    search, dispatch, queued, told = planned(tmp_path, back=[0, 1, 2])
    dispatch.send(queued[0])
    monkeypatch.setattr(interrupts, "_received", [signal.SIGINT])
    with pytest.raises(KeyboardInterrupt):
        dispatch.send(queued[1])
    monkeypatch.setattr(interrupts, "_received", [signal.SIGTERM])
    with pytest.raises(interrupts.Terminated):
        dispatch.send(queued[1])
    assert [job.key for job in search.executor.sent] == ["b0-r0-p00"]  # nothing more sent
    assert len(told) == 1
