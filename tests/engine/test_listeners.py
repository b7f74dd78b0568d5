"""Listeners of a whole search, on the fake trainer: one named in the config hears every
event, in order, after the journal has made each durable; the CSV listener of
docs/listeners.md; bad listeners."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from packexp.app.main import run
from packexp.errors import ConfigError
from packexp.events import (
    Listener,
    MemberScored,
    PackFinished,
    PackStarted,
    RungPlanned,
    SearchFinished,
    TrialEnded,
)
from packexp.runner.journal import Journal
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer
from packexp.testing.searches import search_on_fake

pytestmark = pytest.mark.tf

# (event, the event, the journal then, the checkpoint it names is on disk then)
HEARD: list[tuple[str, object, list[dict], bool]] = []


class Recorder(Listener):
    """Notes each event with the journal as it stands when the event arrives."""

    def __init__(self, run_dir: Path) -> None:
        self.journal = Journal(run_dir)
        HEARD.clear()

    def _note(self, event: object) -> None:
        checkpoint = isinstance(event, MemberScored) and event.result.checkpoint
        HEARD.append((type(event).__name__, event, self.journal.read(),
                      not checkpoint or Path(checkpoint).exists()))

    on_rung_planned = on_pack_started = on_member_scored = on_pack_finished = _note
    on_trial_ended = on_search_finished = _note


def search(tmp_path: Path, *overrides: str) -> dict:
    return search_on_fake(tmp_path, "experiment=quick", "tracking=none", *overrides)


def test_a_configured_listener_hears_each_event_after_the_journal_made_it_durable(tmp_path):
    results = search(tmp_path, f"+listeners.rec._target_={__name__}.Recorder")
    kinds = [k for k, *_ in HEARD]
    assert kinds[0] == RungPlanned.__name__ and kinds[-1] == SearchFinished.__name__
    scored = [e for k, e, *_ in HEARD if k == MemberScored.__name__]
    assert len(scored) == sum(len(t["rungs"]) for t in results["trials"])
    for i, (_, event, journal, on_disk) in enumerate(HEARD):
        if isinstance(event, RungPlanned):
            plans = [r for r in journal if r["event"] == "plan"]
            assert (plans[-1]["bracket"], plans[-1]["rung"]) == (event.bracket, event.rung)
        elif isinstance(event, MemberScored):
            assert journal[-1] == {"event": "result", **event.result.to_dict()}
            assert on_disk  # the checkpoint the journal names is there already
        elif isinstance(event, PackFinished):
            assert journal[-1]["event"] == "pack"
            assert journal[-1]["pack"] == event.pack.to_dict()
            members = [e.result.trial_id for _, e, *_ in HEARD[:i]
                       if isinstance(e, MemberScored) and e.result.pack_id == event.pack.pack_id]
            assert members == event.pack.members
        elif isinstance(event, SearchFinished):
            assert journal[-1]["event"] == "finished"
    started = [e.key for k, e, *_ in HEARD if k == PackStarted.__name__]
    assert started == [p["pack_id"] for p in results["packs"]]
    ended = {e.trial_id: e.status for k, e, *_ in HEARD if k == TrialEnded.__name__}
    assert ended == {t["trial_id"]: t["status"] for t in results["trials"]}


def test_the_scores_csv_listener_writes_a_row_per_member_and_rung(tmp_path):
    results = search(tmp_path, "+listeners.scores._target_="
                               "packexp.listeners.scores_csv.ScoresCsv")
    with (tmp_path / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    expected = sorted((t["trial_id"], str(r["rung"]), str(r["val_accuracy"]))
                      for t in results["trials"] for r in t["rungs"])
    assert sorted((r["trial_id"], r["rung"], r["val_accuracy"]) for r in rows) == expected


def test_a_listener_that_cannot_be_imported_is_one_line_naming_its_key(tmp_path):
    cfg = compose_config(["experiment=quick", "tracking=none",
                          "+listeners.mine._target_=nowhere.Mine"])
    with pytest.raises(ConfigError, match=r"^listeners\.mine\._target_='nowhere\.Mine': "
                                          r"cannot be imported"):
        run(cfg, run_dir=tmp_path, trainer=FakeTrainer(failing=""))
    assert not (tmp_path / "results.json").exists()
