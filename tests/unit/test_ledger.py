"""The ledger (``packexp/runner/ledger.py``) on the fake trainer: a trained pack made durable
in the order a resume relies on (states on disk before the results name them, the results
before the pack's record, the files they supersede deleted after it), the states a trial
starts its next rung from, the epochs each pack spends, trials ended once, a resume's results
restored and a population's exploits made."""

from __future__ import annotations

from pathlib import Path

from packexp.events import (
    Exploit,
    MembersExploited,
    PackFinished,
    RungResult,
    TrialEnded,
    TrialRecord,
)
from packexp.runner import PackedSearch
from packexp.runner.checkpoints import CheckpointStore
from packexp.runner.ledger import Ledger
from packexp.runner.settings import SearchContext, SearchSettings
from packexp.runner.study import Study
from packexp.samplers import Sampler
from packexp.schedulers.base import Bracket, Exploits, Rung, continued
from packexp.space import SearchSpace, Trial
from packexp.space.options import steps_for
from packexp.strategies import Capacity, Strategy
from packexp.testing.fake_trainer import (
    TRAIN_SIZE,
    FakeCache,
    FakeTrainer,
    InOrder,
    State,
    fake_search,
)

BRACKET = Bracket(0, (Rung(2, 1.0), Rung(1, 3.0), Rung(1, 9.0)))  # 1, 3 and 9 epochs
POPULATION = SearchSpace({"x": list(range(40)), "batch_size": [10, 20]})  # exploits' values


def new_search(run_dir: Path, fake_trainer: FakeTrainer, strategy: Strategy | None = None,
               continue_on_promotion: bool = True, sampler: Sampler | None = None
               ) -> PackedSearch:
    return fake_search(run_dir, fake_trainer, strategy=strategy,
                       continue_on_promotion=continue_on_promotion, sampler=sampler)


def trials(n: int, batch_size: int = 10) -> list[Trial]:
    return [Trial(f"t{i}", {"x": i, "batch_size": batch_size}, (float(i),)) for i in range(n)]


def rung_result(trial_id: str, epochs: float = 1.0, val_accuracy: float | None = 0.5,
                checkpoint: str | None = None) -> RungResult:
    return RungResult(trial_id, 1, 0, epochs, 10, val_accuracy, 0.5, 0.1, "p", checkpoint)


class Heard:
    """The search's ``emit``: each event to the study first, then noted, with the checkpoint
    files on disk as it was heard."""

    def __init__(self, study: Study, root: Path) -> None:
        self.study, self.root = study, root
        self.events: list = []
        self.files: list[list[str]] = []

    def __call__(self, event) -> None:
        self.study.write(event)
        self.events.append(event)
        self.files.append(on_disk(self.root))

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


def on_disk(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))


def ledger_of(tmp_path: Path, trainer: FakeTrainer, members: list[Trial],
              continue_on_promotion: bool = True) -> tuple[Ledger, Heard]:
    """A ledger of an in-memory study that has drawn ``members``, its checkpoints in
    ``tmp_path``."""
    study = Study()
    study.add_trials(0, members)
    heard = Heard(study, tmp_path)
    settings = SearchSettings(tags={"strategy": "fake"}, train_size=TRAIN_SIZE,
                              continue_on_promotion=continue_on_promotion)
    ledger = Ledger(study, heard, CheckpointStore(tmp_path, trainer),
                    SearchContext(POPULATION, InOrder(), Capacity.members(2), settings))
    return ledger, heard


def train(trainer: FakeTrainer, ledger: Ledger, group: list[Trial], epochs: float):
    """The pack trained from the states the ledger gives its members."""
    [run] = trainer.train_group(group, FakeCache(), epochs,
                                {t.trial_id: ledger.state_for(t) for t in group})
    return run


def test_a_pack_s_states_are_on_disk_before_its_results_and_its_record_after_them(tmp_path):
    trainer, pair = FakeTrainer(failing=""), trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, pair)
    run = train(trainer, ledger, pair, 1.0)
    results = ledger.commit(BRACKET, 0, 1.0, "p0", run)
    assert heard.kinds() == ["MemberScored", "MemberScored", "PackFinished"]
    assert heard.files[0] == ["t0/r0.json", "t1/r0.json"]  # both, before the first result
    assert [r.checkpoint for r in results] == [str(tmp_path / "t0" / "r0.json"),
                                               str(tmp_path / "t1" / "r0.json")]
    assert [(r.trial_id, r.rung, r.epochs, r.val_accuracy, r.pack_id) for r in results] == [
        ("t0", 0, 1.0, 0.0, "p0"), ("t1", 0, 1.0, 0.01, "p0")]
    assert [e.result for e in heard.events[:2]] == results
    pack = heard.events[2].pack
    assert (pack.pack_id, pack.members, pack.epochs_spent) == ("p0", ["t0", "t1"], 2.0)
    assert ledger.study.packs == [pack]
    assert [list(t.rungs) for t in ledger.study.trials.values()] == [[results[0]], [results[1]]]
    # The next rung reads the memory copies, not the files.
    assert ledger.states == {m.trial_id: m.state for m in run.members}


def test_the_last_rung_and_a_search_that_retrains_write_no_state(tmp_path):
    for continuing, rung in ((True, 2), (False, 0)):
        trainer, pair = FakeTrainer(failing=""), trials(2)
        root = tmp_path / str(continuing)
        ledger, heard = ledger_of(root, trainer, pair, continue_on_promotion=continuing)
        assert not ledger.continues(BRACKET, rung)
        results = ledger.commit(BRACKET, rung, BRACKET.rungs[rung].r, "p0",
                                train(trainer, ledger, pair, BRACKET.rungs[rung].r))
        assert [r.checkpoint for r in results] == [None, None]
        assert on_disk(root) == [] and ledger.states == {}
        assert heard.kinds() == ["MemberScored", "MemberScored", "PackFinished"]


def test_a_trial_continues_from_its_state_in_memory_else_from_its_checkpoint(tmp_path):
    trainer, pair = FakeTrainer(failing=""), trials(2)
    ledger, _ = ledger_of(tmp_path, trainer, pair)
    assert [ledger.state_for(t) for t in pair] == [None, None]  # fresh: start afresh
    run = train(trainer, ledger, pair, 1.0)
    results = ledger.commit(BRACKET, 0, 1.0, "p0", run)
    assert ledger.state_for(pair[0]) is run.members[0].state
    ledger.states.clear()  # as a resumed search, or a worker's states, find them
    assert [ledger.state_for(t) for t in pair] == [r.checkpoint for r in results]
    assert trainer.reads == []  # whoever trains the pack reads the file


def test_a_members_start_names_a_checkpoint_only_when_continuing(tmp_path, fake_trainer):
    # The path travels to whoever trains the pack (this process or a worker), which reads it.
    search = new_search(tmp_path, fake_trainer)
    [fresh, promoted, failed] = trials(3)
    path = fake_trainer.write_state(State("t1", 10), tmp_path / "t1" / "r0")
    for t, checkpoint in ((promoted, path), (failed, None)):
        search.trials[t.trial_id] = TrialRecord(t.trial_id, t.hparams, 1, rungs=[
            rung_result(t.trial_id, checkpoint=checkpoint)])
    search.trials["t0"] = TrialRecord("t0", {}, 1)
    assert search.ledger.state_for(fresh) is None
    assert search.ledger.state_for(failed) is None  # a failed member kept no checkpoint
    assert search.ledger.state_for(promoted) == path
    assert fake_trainer.reads == []
    retrained = new_search(tmp_path, fake_trainer, continue_on_promotion=False)
    retrained.trials.update(search.trials)
    assert retrained.ledger.state_for(promoted) is None
    assert fake_trainer.reads == []


def test_a_rung_s_checkpoint_goes_only_after_the_next_rung_s_pack_record(tmp_path):
    trainer, pair = FakeTrainer(failing=""), trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, pair)
    ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, pair, 1.0))
    promoted = pair[:1]
    heard.events, heard.files = [], []
    [result] = ledger.commit(BRACKET, 1, 3.0, "p1", train(trainer, ledger, promoted, 3.0))
    assert heard.kinds() == ["MemberScored", "PackFinished"]
    assert heard.files == [["t0/r0.json", "t0/r1.json", "t1/r0.json"]] * 2  # r0 until the record
    assert on_disk(tmp_path) == ["t0/r1.json", "t1/r0.json"]
    assert result.checkpoint == str(tmp_path / "t0" / "r1.json")
    assert result.steps == steps_for(3.0, 10, TRAIN_SIZE)  # continued: the step counter runs on
    assert heard.events[-1].pack.epochs_spent == 2.0  # the two epochs its rung adds


def test_a_retrained_trial_spends_every_epoch_of_its_rung_again(tmp_path):
    trainer, pair = FakeTrainer(failing=""), trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, pair, continue_on_promotion=False)
    ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, pair, 1.0))
    ledger.commit(BRACKET, 1, 3.0, "p1", train(trainer, ledger, pair[:1], 3.0))
    assert [e.pack.epochs_spent for e in heard.events if isinstance(e, PackFinished)] == [2.0,
                                                                                          3.0]


def test_a_diverged_member_keeps_no_state_and_ends_failed_after_its_pack_s_record(tmp_path):
    trainer, pair = FakeTrainer(failing="t1"), trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, pair)
    results = ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, pair, 1.0))
    assert heard.kinds() == ["MemberScored", "MemberScored", "PackFinished", "TrialEnded"]
    assert heard.events[-1] == TrialEnded("t1", "failed")
    assert (results[1].failed, results[1].checkpoint, results[1].val_accuracy) == (True, None,
                                                                                  None)
    assert on_disk(tmp_path) == ["t0/r0.json"]
    assert {i: t.status for i, t in ledger.study.trials.items()} == {"t0": "running",
                                                                     "t1": "failed"}
    assert ledger.state_for(pair[1]) is None  # it starts again, as it did


def test_a_trial_ends_once_and_finish_kills_those_still_running(tmp_path):
    trainer, three = FakeTrainer(failing=""), trials(3)
    ledger, heard = ledger_of(tmp_path, trainer, three)
    ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, three[:2], 1.0))
    heard.events = []
    ledger.retire("t0", "finished")
    assert on_disk(tmp_path) == ["t1/r0.json"] and "t0" not in ledger.states  # its files go
    ledger.retire("t0", "killed")  # ended already: nothing
    ledger.finish()
    assert heard.events == [TrialEnded("t0", "finished"), TrialEnded("t1", "killed"),
                            TrialEnded("t2", "killed")]
    assert on_disk(tmp_path) == []
    assert {t.status for t in ledger.study.trials.values()} == {"finished", "killed"}


def test_a_result_read_back_on_resume_is_restored_not_told_again(tmp_path):
    ledger, heard = ledger_of(tmp_path, FakeTrainer(), trials(2))
    scored = rung_result("t0", checkpoint=str(tmp_path / "t0" / "r0.json"))
    diverged = RungResult("t1", 0, 0, 1.0, 10, None, None, None, "p0", None, failed=True)
    ledger.restore(scored)
    ledger.restore(diverged)
    assert heard.events == [TrialEnded("t1", "failed")]  # no MemberScored: journaled before
    assert list(ledger.study.trials["t0"].rungs) == [scored]
    assert ledger.state_for(trials(1)[0]) == scored.checkpoint
    assert [t.status for t in ledger.study.trials.values()] == ["running", "failed"]


def test_an_exploited_member_starts_its_next_rung_from_its_donor_s_state(tmp_path):
    trainer = FakeTrainer(failing="")
    donor, member = trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, [donor, member])
    ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, [donor, member], 1.0))
    exploit = Exploit("t1", "t0", {"x": 7, "batch_size": 20}, dict(member.hparams), 0.01, 0.0)
    decision = Exploits(0, 0, (exploit,))
    after = continued([donor, member], decision.exploits, POPULATION)
    heard.events = []
    ledger.exploit(decision, 1.0, [donor, member], after, done=())
    [told] = heard.events
    assert isinstance(told, MembersExploited) and told.exploits == (exploit,)
    assert told.hparams == {"t0": dict(donor.hparams), "t1": {"x": 7, "batch_size": 20}}
    step = steps_for(1.0, 20, TRAIN_SIZE)  # where one epoch ends at the new batch size
    assert ledger.starts == {"t1": (State("t0", step), step)}
    assert ledger.state_for(after[1]) == State("t0", step)  # the donor's weights
    assert "exploits/t1-r0-from-t0.json" in on_disk(tmp_path)  # a resume starts it there too
    assert len(ledger.study.trials["t1"].lineage) == 1  # the study has it
    # Its next rung spends the epochs from its donor's state on, as a continued trial does.
    heard.events = []
    ledger.commit(BRACKET, 1, 3.0, "p1", train(trainer, ledger, after, 3.0))
    assert heard.events[-1].pack.epochs_spent == 4.0 and ledger.starts == {}
    assert on_disk(tmp_path) == ["t0/r1.json", "t1/r1.json"]  # the copy went with r0's


def test_a_member_already_trained_is_not_exploited_again(tmp_path):
    trainer = FakeTrainer(failing="")
    donor, member = trials(2)
    ledger, heard = ledger_of(tmp_path, trainer, [donor, member])
    ledger.commit(BRACKET, 0, 1.0, "p0", train(trainer, ledger, [donor, member], 1.0))
    exploit = Exploit("t1", "t0", {"x": 7, "batch_size": 10}, dict(member.hparams), 0.01, 0.0)
    decision = Exploits(0, 0, (exploit,))
    heard.events = []
    ledger.exploit(decision, 1.0, [donor, member],
                   continued([donor, member], decision.exploits, POPULATION), done={"t1"},
                   journaled=True)
    [told] = heard.events  # read back from the journal: told, not journaled again
    assert isinstance(told, MembersExploited) and told.journaled
    assert ledger.starts == {}
    assert not (tmp_path / "exploits").exists()
