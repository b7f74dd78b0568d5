"""Contract tests over every tracker found in conf/tracking/."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from omegaconf import open_dict

from packexp.config import instantiate
from packexp.data import Dataset
from packexp.events import Listener, MemberScored, PackFinished, RungPlanned, Summary, TrialEnded
from packexp.records.record import PackRecord, RungResult
from packexp.space import Trial
from packexp.testing.config import CONF_DIR, compose_config
from packexp.tracking import NullTracker, Tracker

TRACKERS = sorted(p.stem for p in Path(CONF_DIR, "tracking").glob("*.yaml"))
# What a tracker implements: its abstract members and the event handlers of a listener.
METHODS = sorted({n for n in Tracker.__abstractmethods__
                  if not isinstance(inspect.getattr_static(Tracker, n), property)}
                 | {n for n in vars(Listener) if n.startswith("on_")})


def unimplemented(cls: type) -> set[str]:
    """What ``Tracker`` declares abstract that ``cls`` neither defines nor inherits concretely."""
    absent = object()
    found = {n: inspect.getattr_static(cls, n, absent) for n in Tracker.__abstractmethods__}
    return {n for n, member in found.items()
            if member is absent or getattr(member, "__isabstractmethod__", False)}


# A tracker that writes through a process of its own (MLflow's writer) is a process test.
@pytest.fixture(params=[pytest.param(t, marks=[pytest.mark.process] * (t == "mlflow"))
                        for t in TRACKERS])
def tracker(request, tmp_path) -> Iterator[Tracker]:
    cfg = compose_config([f"tracking={request.param}"])
    if "store_dir" in cfg.tracking:
        with open_dict(cfg):
            cfg.tracking.store_dir = str(tmp_path / "store")
    tracker = instantiate(cfg.tracking, "tracking")
    yield tracker
    tracker.end("FAILED")  # a test that failed half-way leaves no run open


@pytest.fixture
def dataset() -> Dataset:
    x, y = np.zeros((6, 2), np.float32), np.array([0, 1, 0, 1, 0, 1], np.int32)
    return Dataset("tiny", x[:4], y[:4], x[4:], y[4:], num_classes=2)


def test_every_tracking_config_is_found():
    assert {"mlflow", "none"} <= set(TRACKERS)


def test_the_tracker_base_is_small():
    assert sorted(Tracker.__abstractmethods__) == ["end", "start"]


def test_a_tracker_that_forgets_a_method_is_caught():
    members = {k: v for k, v in vars(NullTracker).items() if k != "end"}
    forgetful = type("Forgetful", (Tracker,), members)
    assert unimplemented(forgetful) == {"end"}
    with pytest.raises(TypeError, match="abstract"):
        forgetful()


class TestTrackerContract:
    def test_implements_every_abstract_member(self, tracker):
        assert isinstance(tracker, Tracker)
        assert not type(tracker).__abstractmethods__
        assert unimplemented(type(tracker)) == set()

    @pytest.mark.parametrize("method", METHODS)
    def test_takes_the_calls_as_the_base_declares_them(self, tracker, method):
        declared = inspect.signature(getattr(Tracker, method))
        assert inspect.signature(getattr(type(tracker), method)) == declared

    def test_takes_a_whole_search(self, tracker, dataset, tmp_path, caplog):
        caplog.set_level(logging.WARNING, logger="packexp")
        trials = [Trial(f"t{i}", {"learning_rate": 0.1 * (i + 1), "batch_size": 32},
                        features=(float(i),)) for i in range(3)]
        tracker.start("contract", params={"seed": 0, "scheduler.R": 3},
                      tags={"task": "tune"}, config_yaml="seed: 0\n",
                      dataset=dataset, dataset_source=None)
        assert tracker.run_id is None or isinstance(tracker.run_id, str)
        tracker.on_rung_planned(RungPlanned(0, 0, 1.0, [trials[:2], trials[2:]], [None, None]))
        pack = PackRecord("b0-r0-p00", 0, 0, 1.0, ["t0", "t1"], fused=True, step_time_ms=2.0,
                          train_s=0.1)
        for trial in trials:
            result = RungResult(trial.trial_id, 0, 0, 1.0, 3, 0.5, None, 0.25, pack.pack_id,
                                None)
            tracker.on_member_scored(MemberScored(result, trial, pack, {"model": "tiny"}))
        tracker.on_pack_finished(PackFinished(pack, 0, best=0.5))
        tracker.on_trial_ended(TrialEnded("t0", "killed"))
        tracker.on_trial_ended(TrialEnded("t1", "finished"))
        tracker.on_trial_ended(TrialEnded("never-logged", "failed"))
        (tmp_path / "results.json").write_text("{}")
        tracker.on_summary(Summary(
            {"wall_time_s": 1.0, "best_val_accuracy": 0.5, "missing": None},
            [(tmp_path / "missing.json", None), (tmp_path / "results.json", None),
             (tmp_path / "results.json", "plots")]))
        tracker.end("FINISHED")
        assert tracker.location is None or isinstance(tracker.location, str)
        assert not [r.getMessage() for r in caplog.records
                    if r.name.startswith("packexp") and r.levelno >= logging.WARNING]

    def test_end_is_safe_twice(self, tracker):
        tracker.start("contract", params={}, tags={})
        tracker.end("FINISHED")
        tracker.end("FINISHED")
        assert tracker.run_id is None
