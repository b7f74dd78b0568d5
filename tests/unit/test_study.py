"""The study (``packexp/runner/study.py``) and the trainer seam: a search's record owned in one
place, and searches on the fake trainer through the runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packexp.errors import ConfigError
from packexp.events import MemberScored, PackFinished, TrialEnded
from packexp.executors import LocalExecutor
from packexp.records.search_result import SearchResult
from packexp.runner.journal import Journal
from packexp.runner.study import Study, load
from packexp.testing.fake_trainer import HYPERBAND, FakeTrainer, fake_search


def test_the_study_journals_each_event_before_it_keeps_it(tmp_path, monkeypatch):
    """The runner writes to the study, which journals first: an append that fails leaves the
    study as it was, so what the search reads back is always what a resume would find."""
    search = fake_search(tmp_path, FakeTrainer())
    written = []
    append = Journal.append

    def failing_at_the_first_pack(self, event, **record):
        if event == "pack":
            raise OSError("disk full")
        written.append(event)
        append(self, event, **record)

    monkeypatch.setattr(Journal, "append", failing_at_the_first_pack)
    with pytest.raises(OSError, match="disk full"):
        search.run(HYPERBAND)
    assert written[:2] == ["plan", "result"] and "pack" not in written
    assert search.study.packs == []  # not journaled, so not kept
    scored = [r for t in search.study.trials.values() for r in t.rungs]
    journaled = [r for r in Journal(tmp_path).read() if r["event"] == "result"]
    assert [r.to_dict() for r in scored] == [
        {k: v for k, v in r.items() if k != "event"} for r in journaled]


def test_a_study_in_memory_keeps_without_journaling():
    study = Study()
    assert study.journal is None and study.best() is None and study.front() is None
    assert study.session == 0 and study.earlier_s == 0.0 and not study.resumed


def test_the_result_is_frozen_and_its_json_is_results_json(tmp_path):
    search = fake_search(tmp_path, FakeTrainer())
    search.run(HYPERBAND)
    search.finish()
    models = {search.best().trial_id: {"file": "models/x.json", "rung": 0,
                                       "epochs": search.best().epochs}}
    result = search.study.result(wall_time_s=2.0, models=models, strategy="fake")
    assert isinstance(result, SearchResult) and result.best["model"] == "models/x.json"
    with pytest.raises(AttributeError):
        result.results = {}  # frozen
    out = result.to_json()
    out["best"] = None  # a copy: the result is unchanged
    assert result.best is not None and result.to_json()["best"] == result.results["best"]
    assert [t["trial_id"] for t in out["trials"]] == list(search.trials)
    assert len(out["packs"]) == len(search.packs) and out["resumed"] is False
    (tmp_path / "results.json").write_text(json.dumps(result.to_json()))
    again = load(tmp_path)
    assert again.to_json() == json.loads(json.dumps(result.to_json()))
    assert again.with_facts(stopped="budget").stopped == "budget" and again.stopped is None


def test_a_resumed_study_reads_its_sessions_and_time_from_the_journal(tmp_path):
    search = fake_search(tmp_path / "a", FakeTrainer())
    search.run(HYPERBAND)
    packs = [r for r in Journal(tmp_path / "a").read() if r["event"] == "pack"]
    (tmp_path / "b").mkdir()
    journal = Journal(tmp_path / "b")
    journal.append("start", config={})
    journal.append("pack", pack=packs[0]["pack"], elapsed_s=5.0)
    journal.append("resume", overrides=[])
    journal.append("pack", pack=packs[1]["pack"], elapsed_s=3.0)
    study = Study(journal, journaled=journal.read())
    assert study.session == 2 and study.earlier_s == 8.0 and study.resumed
    assert [p.pack_id for p in study.packs] == [p["pack"]["pack_id"] for p in packs[:2]]


def test_the_study_is_no_listener_and_the_listeners_hear_after_it(tmp_path):
    heard = []

    class Order:
        def emit(self, event):
            journaled = [r["event"] for r in Journal(tmp_path).read()]
            if isinstance(event, MemberScored | PackFinished):
                heard.append((type(event).__name__, journaled[-1]))
            elif isinstance(event, TrialEnded):
                heard.append(("TrialEnded", search.study.trials[event.trial_id].status))

    search = fake_search(tmp_path, FakeTrainer())
    search.listeners = Order()
    search.run(HYPERBAND)
    assert ("MemberScored", "result") in heard and ("PackFinished", "pack") in heard
    assert all(kind != "TrialEnded" or status != "running" for kind, status in heard)


def test_the_executor_trains_with_the_trainer_it_is_given(tmp_path):
    trainer = FakeTrainer()
    search = fake_search(tmp_path, trainer)
    assert search.executor.trainer is trainer and search.store.trainer is trainer
    search.run(HYPERBAND)
    assert trainer.calls and {p.suffix for p in (tmp_path / "checkpoints").rglob("*.*")} <= {
        ".json"}
    assert LocalExecutor().trainer.name == "tensorflow"  # the default, loaded when it trains


def test_ray_refuses_a_trainer_that_measures_no_device():
    pytest.importorskip("ray")
    from packexp.executors.ray import RayExecutor

    with pytest.raises(ConfigError, match=r"executor=ray: .* the fake trainer runs under "
                                          "executor=local"):
        RayExecutor(None, None, trainer=FakeTrainer())


def test_no_module_of_the_app_reads_or_writes_the_journal_but_through_the_study():
    """The study (``runner/study.py``, ``runner/replay.py``) is the journal's only reader
    and writer: no module under ``packexp/app/`` imports ``runner.journal`` or names
    ``Journal``."""
    import ast

    import packexp

    app = Path(packexp.__file__).parent / "app"
    found = []
    for path in sorted(app.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.id] if isinstance(node, ast.Name)
                     else [node.attr] if isinstance(node, ast.Attribute) else [])
            found += [f"{path.relative_to(app)}:{node.lineno} {n}" for n in names
                      if n == "packexp.runner.journal" or n in ("Journal", "JournalError")]
    assert not found, found
