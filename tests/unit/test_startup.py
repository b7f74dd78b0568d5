"""Start-up split by phase (packexp/startup.py): the parts add up to the whole job."""

from __future__ import annotations

import pytest

from packexp import startup
from packexp.records.report import describe


@pytest.fixture
def marks(monkeypatch):
    kept: list[tuple[str, float]] = []
    monkeypatch.setattr(startup, "_marks", kept)
    return kept


def test_phases_split_the_job_and_planning_takes_what_follows_the_last_mark(marks):
    marks += [("python", 100.5), ("imports", 101.0), ("tensorflow", 109.0), ("data", 109.5),
              ("model", 110.0), ("data", 110.25)]
    split = startup.phases(100.0, 111.0)
    assert split == {"python": 0.5, "imports": 0.5, "tensorflow": 8.0, "data": 0.75,
                     "model": 0.5, "planning": 0.75}
    assert list(split) == [p for p in startup.PHASES if p in split]  # the command's order
    assert sum(split.values()) == pytest.approx(11.0)


def test_an_earlier_job_s_marks_are_not_this_job_s(marks):
    marks += [("python", 1.0), ("tensorflow", 9.0), ("composition", 20.5), ("data", 21.0)]
    assert startup.phases(20.0, 22.0) == {"composition": 0.5, "data": 0.5, "planning": 1.0}


def test_a_mark_names_a_known_phase(marks):
    startup.mark("data")
    assert [p for p, _ in marks] == ["data"]
    with pytest.raises(ValueError, match="unknown start-up phase 'dta'"):
        startup.mark("dta")


def test_the_summary_names_the_largest_phases_first_and_drops_the_tiny():
    assert describe({"python": 0.4, "tensorflow": 8.12, "executor": 0.01,
                             "calibration": 5.0}) == "tensorflow 8.1, calibration 5.0, python 0.4"
