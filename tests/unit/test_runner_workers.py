"""The runner's one loop under two workers whose packs come back out of order (the last sent
first), on the fake trainer: a synchronous rung is committed in plan order whichever pack
ends first; an asynchronous plan as each pack ends; and a search killed under them resumes,
told the journal's facts in the order they happened (to the unbroken run's results under a
synchronous policy)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from packexp.executors import LocalExecutor, PackJob
from packexp.runner import PackedSearch
from packexp.runner.journal import Journal
from packexp.schedulers import Asha, Hyperband, Pbt, Planned, Retire, Scheduler
from packexp.testing.fake_trainer import SPACE, FakeTrainer, fake_search, outcome
from packexp.testing.policies import simulate


class LastSentFirst(LocalExecutor):
    """Two workers; the pack sent last comes back first."""

    workers = 2

    def _collect(self) -> tuple[PackJob, list, tuple[float, float]]:
        job = list(self._running.values())[-1]
        started = time.time()
        states = {i: self.trainer.read_state(s) if isinstance(s, str) else s
                  for i, s in job.states.items()}
        runs = self.trainer.train_group(job.group, self.cache, job.epochs, states,
                                        fusion=job.fusion, lr_horizon=job.lr_horizon)
        return job, runs, (started, time.time())


def search(run_dir: Path, trainer: FakeTrainer, policy: Scheduler,
           records: list | None = None) -> PackedSearch:
    found = fake_search(run_dir, trainer, policy.brackets(),
                        executor=LastSentFirst(trainer=trainer))
    assert (records is not None) == found.study.resumed  # a journal there: resumed
    found.run(policy)
    found.finish()
    return found


def killed_and_resumed(tmp_path: Path, trainer: FakeTrainer, policy: Scheduler,
                       part: int) -> tuple[PackedSearch, PackedSearch, list[dict]]:
    """An unbroken search; the same search killed after ``1/part`` of its packs; the killed
    one resumed from its journal (returned too)."""
    whole = search(tmp_path / "whole", trainer, policy)
    trainer.die_at_call, trainer.calls = len(trainer.calls) // part, []
    with pytest.raises(KeyboardInterrupt):
        search(tmp_path / "killed", trainer, policy)
    records = Journal(tmp_path / "killed").read()
    trainer.die_at_call, trainer.calls = None, []
    return whole, search(tmp_path / "killed", trainer, policy, records), records


def committed(run_dir: Path) -> list[str]:
    return [r["pack"]["pack_id"] for r in Journal(run_dir).read() if r["event"] == "pack"]


def test_a_synchronous_rung_is_committed_in_plan_order_whichever_pack_ends_first(
        tmp_path, fake_trainer):
    two = search(tmp_path / "two", fake_trainer, Hyperband(9, 3))
    sent = [c["ids"] for c in fake_trainer.calls]
    one = fake_search(tmp_path / "one", FakeTrainer(), Hyperband(9, 3).brackets())
    one.run(Hyperband(9, 3))
    one.finish()
    assert outcome(two) == outcome(one)
    assert committed(tmp_path / "two") == committed(tmp_path / "one")
    packs = [p.members for p in two.packs]
    assert sent != packs  # trained out of order...
    assert sorted(map(tuple, sent)) == sorted(map(tuple, packs))  # ...committed in order


def test_an_asynchronous_plan_is_committed_as_each_pack_ends(tmp_path, fake_trainer):
    asha = Asha(9, 3, sample_size=4)
    search(tmp_path, fake_trainer, asha)
    trained = [tuple(c["ids"]) for c in fake_trainer.calls]
    journaled = [tuple(r["pack"]["members"]) for r in Journal(tmp_path).read()
                 if r["event"] == "pack"]
    assert journaled == trained  # in the order they came back, not as planned
    planned = [tuple(g) for r in Journal(tmp_path).read() if r["event"] == "plan"
               for g in r["packs"]]
    assert journaled != planned


@pytest.mark.parametrize("policy", [Hyperband(9, 3), Pbt(population=4, epochs=6, interval=2)],
                         ids=["hyperband", "pbt"])
def test_a_search_killed_under_two_workers_resumes_to_the_unbroken_ones(policy, tmp_path,
                                                                       fake_trainer):
    whole, resumed, _ = killed_and_resumed(tmp_path, fake_trainer, policy, 2)
    assert outcome(resumed) == outcome(whole)
    assert [p.pack_id for p in resumed.packs] == [p.pack_id for p in whole.packs]
    assert resumed.best() == whole.best()


@pytest.mark.parametrize("policy", [Hyperband(9, 3), Pbt(population=4, epochs=6, interval=2)],
                         ids=["hyperband", "pbt"])
def test_simulate_draws_and_decides_as_the_runner_does(policy, tmp_path, fake_trainer):
    """``packexp.testing.policies.simulate`` against the runner on the fake trainer (score
    x / 100, one member diverged): the same plans, of the same configurations, and the same
    trials ended."""
    runner = fake_search(tmp_path, fake_trainer, policy.brackets())
    runner.run(policy)

    def score(trial, epochs):
        return None if trial.trial_id == fake_trainer.failing else trial.hparams["x"] / 100

    made = simulate(policy, SPACE, score)
    journaled = [(r["bracket"], r["rung"], sorted(i for p in r["packs"] for i in p))
                 for r in Journal(tmp_path).read() if r["event"] == "plan"]
    simulated = [(p.bracket, p.rung, sorted(p.trial_ids)) for p in made
                 if isinstance(p, Planned)]
    assert simulated == journaled
    values = {i: t.hparams for i, t in runner.trials.items()}
    assert all(dict(t.hparams) == values[t.trial_id] for p in made if isinstance(p, Planned)
               for t in p.trials if p.rung == 0)
    ended = {m.trial_id: m.status for m in made if isinstance(m, Retire)}
    assert ended == {i: t.status for i, t in runner.trials.items() if t.status != "running"}


def test_asha_killed_under_two_workers_resumes_what_it_journaled_and_keeps_its_budget(
        tmp_path, fake_trainer):
    """Under several workers ASHA's decisions depend on which pack ends first, so a resumed
    search may promote otherwise than the unbroken one (docs/schedulers.md); it still trains
    nothing its journal has again, ends every trial and keeps within its budget."""
    asha = Asha(9, 3, sample_size=4)
    _, resumed, records = killed_and_resumed(tmp_path, fake_trainer, asha, 3)
    journaled = {(r["trial_id"], r["epochs"]) for r in records if r["event"] == "result"}
    assert journaled and not journaled & set(fake_trainer.trained())
    assert {t.status for t in resumed.trials.values()} <= {"finished", "killed", "failed"}
    assert sum(p.epochs_spent for p in resumed.packs) <= asha.max_epochs + 1e-9
