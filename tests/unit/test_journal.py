"""The journal: one-line appends, fsynced at the records that make others count, a torn final
line forgiven, a torn middle refused."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest

from packexp.runner import journal as journal_module
from packexp.runner.journal import Journal, JournalError, first_difference

TORN = '{"event": "result", "trial_'  # a record cut short by a kill


@pytest.fixture
def journal(tmp_path) -> Journal:
    journal = Journal(tmp_path)
    journal.append("start", config={"seed": 0}, overrides=["seed=0"])
    return journal


def test_records_read_back_as_appended(tmp_path):
    journal = Journal(tmp_path)
    assert not journal.exists
    records = [("start", {"config": {"seed": 0, "scheduler.R": 9}, "overrides": []}),
               ("plan", {"bracket": 2, "rung": 0, "packs": [["b2-t000", "b2-t001"]],
                         "fusion": [None]}),
               ("result", {"trial_id": "b2-t000", "val_accuracy": 0.8125, "checkpoint": None,
                           "failed": False}),
               ("pack", {"pack": {"pack_id": "b2-r0-p00", "members": ["b2-t000"]},
                         "elapsed_s": 1.5})]
    for event, record in records:
        journal.append(event, **record)
    assert journal.exists
    assert journal.read() == [{"event": event, **record} for event, record in records]
    assert [r["trial_id"] for r in journal.events("result")] == ["b2-t000"]
    assert list(journal.events("finished")) == []


def test_each_record_is_one_line_written_once_then_fsynced(journal, monkeypatch):
    calls = []
    write, fsync = os.write, os.fsync
    monkeypatch.setattr(journal_module.os, "write",
                        lambda fd, data: calls.append(("write", data)) or write(fd, data))
    monkeypatch.setattr(journal_module.os, "fsync",
                        lambda fd: calls.append(("fsync", None)) or fsync(fd))
    journal.append("result", trial_id="a", val_accuracy=0.5)
    journal.append("result", trial_id="b", val_accuracy=None)
    assert [kind for kind, _ in calls] == ["write", "fsync", "write", "fsync"]
    for (_, data), trial_id in zip(calls[::2], "ab", strict=True):
        assert data.endswith(b"\n") and data.count(b"\n") == 1
        assert json.loads(data)["trial_id"] == trial_id
    assert journal.path.read_bytes().endswith(calls[-2][1])
    # A result made durable by its pack's record: written now, fsynced with that record.
    calls.clear()
    journal.append("result", durable=False, trial_id="c", val_accuracy=0.1)
    journal.append("pack", pack={"pack_id": "p"})
    assert [kind for kind, _ in calls] == ["write", "write", "fsync"]
    assert [r["event"] for r in journal.read()[-2:]] == ["result", "pack"]


def test_a_search_fsyncs_at_its_packs_records_not_at_each_result(tmp_path, monkeypatch):
    """Each pack's results are fsynced with its record: a search's fsyncs grow with its packs
    and its start and end, not with every result and plan besides."""
    from packexp.testing.fake_trainer import HYPERBAND, FakeTrainer, fake_search

    synced: list[str] = []
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: synced.append(
        os.pread(fd, 10_000_000, 0).rstrip(b"\n").rsplit(b"\n", 1)[-1]))
    search = fake_search(tmp_path, FakeTrainer())
    search.run(HYPERBAND)
    records = Journal(tmp_path).read()
    events = [json.loads(line)["event"] for line in synced]
    assert set(events) == {"start", "pack"} and events.count("pack") == len(search.packs)
    assert sum(r["event"] in ("result", "plan") for r in records) > len(search.packs)


def test_a_record_that_cannot_be_serialised_leaves_the_journal_untouched(journal):
    before = journal.path.read_bytes()
    with pytest.raises(TypeError):
        journal.append("result", trial_id="a", state=object())
    assert journal.path.read_bytes() == before


def test_reading_where_there_is_no_journal_says_so(tmp_path):
    with pytest.raises(JournalError, match=r"journal\.jsonl: no journal here; nothing to resume"):
        Journal(tmp_path).read()


@pytest.mark.parametrize("content", ["", "\n", TORN, '{"event": "result"}\n'])
def test_a_journal_must_begin_with_a_start_record(tmp_path, content):
    journal = Journal(tmp_path)
    journal.path.write_text(content)
    with pytest.raises(JournalError, match="does not begin with a start record"):
        journal.read()


def test_a_torn_final_line_is_ignored_and_logged(journal, caplog):
    journal.append("result", trial_id="a")
    with open(journal.path, "a") as f:
        f.write(TORN)
    caplog.set_level(logging.WARNING, logger="packexp.runner.journal")
    assert [r["event"] for r in journal.read()] == ["start", "result"]
    assert f"{journal.path}: ignoring a half-written final line" in caplog.text


def test_a_torn_line_in_the_middle_is_an_error(journal):
    with open(journal.path, "a") as f:
        f.write('{"broken\n')
    journal.append("result", trial_id="a")
    where = re.escape(str(journal.path))
    with pytest.raises(JournalError, match=rf"^{where}:2: not a JSON record$"):
        journal.read()


def test_a_run_resumed_after_a_torn_final_line_can_be_resumed_again(journal):
    journal.append("result", trial_id="a")
    with open(journal.path, "a") as f:
        f.write(TORN)  # killed mid-append
    assert [r["event"] for r in journal.read()] == ["start", "result"]  # the resume reads
    journal.append("resume", overrides=[])  # and goes on
    journal.append("result", trial_id="b")
    assert [r["event"] for r in journal.read()] == ["start", "result", "resume", "result"]


def test_identical_configs_have_no_difference():
    config = {"seed": 0, "scheduler.R": 9, "model.width": 64}
    assert first_difference(config, dict(config)) is None


def test_the_difference_names_the_key_with_both_values():
    journaled = {"seed": 1, "scheduler.R": 9}
    assert first_difference(journaled, {"seed": 0, "scheduler.R": 9}) == (
        "seed=0 here, but the journal has seed=1")


def test_the_shallowest_then_alphabetically_first_difference_is_named():
    journaled = {"search_space.params.batch_size": [20], "strategy.seed": 0, "seed": 0}
    here = {"search_space.params.batch_size": [20, 30], "strategy.seed": 1, "seed": 1}
    assert first_difference(journaled, here).startswith("seed=1 here")
    del journaled["seed"], here["seed"]
    assert first_difference(journaled, here).startswith("strategy.seed=1 here")
    journaled["strategy.seed"] = here["strategy.seed"]
    assert first_difference(journaled, here) == (
        "search_space.params.batch_size=[20, 30] here, but the journal has "
        "search_space.params.batch_size=[20]")


def test_a_key_on_one_side_only_is_unset_on_the_other():
    assert first_difference({"seed": 0}, {"seed": 0, "pack.fusion": "auto"}) == (
        "pack.fusion='auto' here, but the journal has pack.fusion='<unset>'")
    assert first_difference({"seed": 0, "pack.fusion": None}, {"seed": 0}) == (
        "pack.fusion='<unset>' here, but the journal has pack.fusion=None")


def test_a_journal_of_a_release_before_the_stand_ins_resumes_and_a_changed_key_is_still_refused(
        tmp_path):
    """The earlier release journaled no ``surrogate.*``: it ran at scale 1, which a resume
    now composes; asking a stand-in of it names the key."""
    from packexp.errors import ConfigError
    from packexp.runner.replay import Recorded

    old = {"seed": 0, "scheduler.R": 9}
    Journal(tmp_path).append("start", config=old, overrides=[])
    now = {**old, "surrogate.scale": 1, "surrogate.transfer": 3,
           "surrogate.readout_zero_init": False}
    assert Recorded.read(tmp_path).to_continue(now, resume=True)[0]["config"] == old
    with pytest.raises(ConfigError, match=r"surrogate\.scale=4 here, but the journal has "
                                          r"surrogate\.scale=1"):
        Recorded.read(tmp_path).to_continue({**now, "surrogate.scale": 4}, resume=True)
