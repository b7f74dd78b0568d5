"""``executor=ray``'s pool without a cluster: its settings refused in one line, where its
packs trained drawn as a lane per worker, and the place a calibration is kept for."""

from __future__ import annotations

import pytest

from packexp.errors import ConfigError
from packexp.executors.local import LocalExecutor
from packexp.records import plots
from packexp.records.record import PackRecord
from packexp.records.search_result import SearchResult
from packexp.testing.fake_trainer import FakeTrainer

ray = pytest.importorskip("ray")


def ray_executor(**settings):
    from packexp.executors.ray import RayExecutor

    return RayExecutor(None, "/tmp/unused", trainer=TensorFlowLike(), **settings)


class TensorFlowLike(FakeTrainer):
    """A trainer that measures its device, as TensorFlow's does (Ray takes no other)."""

    measures_device = True


@pytest.mark.parametrize(("key", "value", "says"), [
    ("placement", "STRICT_PACK", "must be PACK or SPREAD"),
    ("max_restarts", -1, "must be at least 0"),
    ("max_task_retries", -2, "must be at least 0"),
    ("num_workers", 0, "must be at least 1"),
])
def test_a_bad_pool_setting_is_one_line_naming_it(key, value, says):
    with pytest.raises(ConfigError) as error:
        ray_executor(**{key: value})
    assert str(error.value).startswith(f"executor.{key}={value}: ")
    assert says in str(error.value) and "\n" not in str(error.value)


def test_a_calibration_on_ray_is_kept_for_its_workers_shape():
    """A local run's calibrations keep their key; a Ray worker's CPUs and GPU share, and how
    many workers share the machine, are part of a Ray run's."""
    assert LocalExecutor(trainer=FakeTrainer()).place() == {"executor": "local"}
    place = ray_executor(cpus_per_pack=2, gpus_per_pack=0.5).place()
    assert place == {"executor": "ray", "cpus_per_pack": 2, "gpus_per_pack": 0.5,
                     "workers": 0}  # none asked of a cluster yet


def results(packs: list[PackRecord]) -> SearchResult:
    trials = sorted({m for p in packs for m in p.members})
    rung = {"rung": 0, "epochs": 1, "steps": 10, "val_loss": 1.0, "train_loss": 1.0}
    return SearchResult.from_json("/tmp/unused", {
        "strategy": "knn", "model": "mlp3", "dataset": "digits",
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "trials": [{"trial_id": t, "bracket": 0, "status": "finished", "hparams": {},
                    "rungs": [{**rung, "pack_id": p.pack_id, "val_accuracy": 0.5}
                              for p in packs if t in p.members]} for t in trials],
        "packs": [p.to_dict() for p in packs]})


def pack(pack_id: str, members: list[str], start: float, end: float, **where) -> PackRecord:
    return PackRecord(pack_id, 0, 0, 1, members, started_s=start, elapsed_s=end,
                      train_s=end - start, **where)


def test_the_timeline_draws_a_lane_per_worker_above_the_trials():
    node = "f" * 56
    packs = [pack("p0", ["a", "b"], 0.0, 1.0, worker=0, node=node, host="127.0.0.1"),
             pack("p1", ["c"], 0.2, 0.9, worker=2, node="e" * 56, host="10.0.0.2"),
             pack("p2", ["a"], 1.0, 2.0, worker=0, node=node, host="127.0.0.1")]
    assert plots.worker_lanes(packs) == {(None, 0): (0, "worker 0 · 127.0.0.1 ffffffff"),
                                         (None, 2): (1, "worker 2 · 10.0.0.2 eeeeeeee")}
    ax = plots.timeline_figure(results(packs)).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:2] == ["worker 0 · 127.0.0.1 ffffffff", "worker 2 · 10.0.0.2 eeeeeeee"]
    assert [label.split()[0] for label in labels[2:]] == ["a", "b", "c"]
    # Each lane names the packs its worker trained, where it trained them.
    named = {(t.get_text(), t.get_position()[1]) for t in ax.texts}
    assert {("p0", 0), ("p2", 0), ("p1", 1)} <= named


def test_a_local_runs_timeline_has_no_lanes():
    packs = [pack("p0", ["a", "b"], 0.0, 1.0), pack("p1", ["a"], 1.0, 2.0)]
    assert plots.worker_lanes(packs) == {}
    ax = plots.timeline_figure(results(packs)).axes[0]
    assert [t.get_text().split()[0] for t in ax.get_yticklabels()] == ["a", "b"]


def test_each_trial_run_is_tagged_with_the_node_that_trained_its_rung(tmp_path, monkeypatch):
    from packexp.events import MemberScored
    from packexp.records.record import PackRecord, RungResult
    from packexp.space import Trial
    from packexp.tracking.mlflow_tracker import MlflowTracker, _strings

    tracker = MlflowTracker(store_dir=str(tmp_path))  # no run started: no writer process
    tagged = {}
    monkeypatch.setattr(tracker, "log_trial_rung",
                        lambda trial_id, hparams, tags, epochs, metrics:
                        tagged.update({trial_id: _strings(tags)}))
    result = RungResult("a", 0, 0, 1.0, 10, 0.5, 0.5, 0.5, "p0", None)
    on_ray = PackRecord("p0", 0, 0, 1.0, ["a"], worker=2, node="f" * 56, host="10.0.0.2")
    tracker.on_member_scored(MemberScored(result, Trial("a", {"batch_size": 32}, ()), on_ray))
    assert {k: tagged["a"][k] for k in ("worker", "node", "host")} == {
        "worker": "2", "node": "f" * 56, "host": "10.0.0.2"}
    local = PackRecord("p0", 0, 0, 1.0, ["a"])
    tracker.on_member_scored(MemberScored(result, Trial("a", {"batch_size": 32}, ()), local))
    assert not {"worker", "node", "host"} & set(tagged["a"])  # a local run has no places


def test_a_resumed_runs_sessions_have_lanes_of_their_own():
    """Each session numbers its workers afresh: worker 0 of the first session and worker 0
    of the resumed one are two lanes, each naming its session."""
    packs = [pack("p0", ["a"], 0.0, 1.0, worker=0, node="a" * 56, host="h", session=0),
             pack("p1", ["b"], 0.0, 1.0, worker=0, node="b" * 56, host="h", session=1)]
    assert plots.worker_lanes(packs) == {(0, 0): (0, "worker 0 (session 0) · h aaaaaaaa"),
                                         (1, 0): (1, "worker 0 (session 1) · h bbbbbbbb")}


def test_the_anytime_curve_follows_when_packs_ended_not_when_they_were_published():
    """Under Ray, Hyperband publishes packs in plan order, and a pack can end before an
    earlier one of the plan: the best-so-far curve goes forward in time all the same, each
    point counting only packs that had ended by then."""
    from types import SimpleNamespace

    from packexp.events import PackRecord, RungResult
    from packexp.records.results import anytime

    ends = {"p0": 3.0, "p1": 1.0, "p2": 2.0}  # published p0, p1, p2; ended p1, p2, p0
    packs = [PackRecord(k, 0, 0, 1.0, ["t"], elapsed_s=end, epochs_spent=1.0)
             for k, end in ends.items()]
    rungs = [RungResult("t", 0, 0, 1.0, 1, score, 0.1, 0.1, k, None)
             for k, score in zip(ends, (0.9, 0.5, 0.7), strict=True)]
    points = anytime([SimpleNamespace(rungs=rungs)], packs)
    assert [(p["pack_id"], p["elapsed_s"], p["best"]) for p in points] == [
        ("p1", 1.0, 0.5), ("p2", 2.0, 0.7), ("p0", 3.0, 0.9)]
    assert [p["epochs"] for p in points] == [1.0, 2.0, 3.0]
