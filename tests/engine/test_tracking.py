"""MLflow tracking: run hierarchy, tags, metrics, artifacts, stores and bad input. The tests of
the MLflow writer as a process are tests/system/test_tracking.py's."""

from __future__ import annotations

import collections
import http.server
import json
import logging
import os
import textwrap
import threading
import time

import pytest
from hydra.utils import instantiate
from omegaconf import open_dict

from packexp import telemetry
from packexp.app.main import run
from packexp.config import fit_dataset_to_model
from packexp.errors import ConfigError
from packexp.records import plots
from packexp.records.record import PackRecord, RungResult, TrialRecord
from packexp.records.results import speedup_metrics
from packexp.records.search_result import SearchResult
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer
from packexp.testing.processes import wait_until
from packexp.tracking import MlflowTracker, TrackingError, hydra_tags, writer_process

QUICK9 = ["experiment=quick", "scheduler.R=9"]


def tune(tmp_path, *overrides: str, tracking: str = "mlflow", run_dir=None, trainer=None):
    """A search at R=9; on ``trainer`` (a ``FakeTrainer``) where the check is what is tracked,
    on TensorFlow where it is a measured number."""
    cfg = compose_config([*QUICK9, f"tracking={tracking}", *overrides])
    if tracking == "mlflow":
        with open_dict(cfg):
            cfg.tracking.store_dir = str(tmp_path / "store")
    out = run_dir or tmp_path / "run"
    best = run(cfg, run_dir=out, trainer=trainer)
    return best, json.loads((out / "results.json").read_text()), out


def store(tmp_path, experiment: str = "packexp"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in
            sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))]


@pytest.mark.tf
def test_a_search_logs_its_hierarchy_tags_metrics_and_artifacts(tmp_path):
    best, results, out = tune(tmp_path, "tracking.sample_interval_s=0.2")
    client, [parent], children = store(tmp_path)
    pid = parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert {parent.data.tags[k] for k in ("strategy", "model", "dataset", "task")} == {
        "knn", "mlp3", "digits", "tune"}
    assert parent.info.run_name == "knn-s0-mlp3-digits-accuracy-hyperband-R9"
    params = parent.data.params
    assert (params["model.width"], params["strategy.threshold"], params["scheduler.R"]) == (
        "64", str(compose_config(QUICK9).strategy.threshold), "9")
    assert (params["strategy"], params["scheduler"]) == ("knn", "hyperband")
    assert not [k for k in params if k.endswith("_target_")]

    packs = {p["pack_id"]: p for p in results["packs"]}
    by_name = {c.info.run_name: c for c in children}
    assert sorted(by_name) == sorted(t["trial_id"] for t in results["trials"])
    outcome = {"killed": ("KILLED", "cut"), "finished": ("FINISHED", "completed"),
               "failed": ("FAILED", "diverged")}
    for trial in results["trials"]:
        child = by_name[trial["trial_id"]]
        tags, rungs = child.data.tags, trial["rungs"]
        assert tags["mlflow.parentRunId"] == pid
        assert (child.info.status, tags["outcome"]) == outcome[trial["status"]]
        assert (tags["strategy"], tags["model"], tags["dataset"]) == ("knn", "mlp3", "digits")
        assert (tags["bracket"], tags["rung"], tags["pack_id"]) == (
            str(trial["bracket"]), str(rungs[-1]["rung"]), rungs[-1]["pack_id"])
        if len(rungs) > 1:
            assert tags["promoted_from"] == rungs[-2]["pack_id"]
        else:
            assert "promoted_from" not in tags
        assert child.data.params["batch_size"] == str(trial["hparams"]["batch_size"])
        steps = [round(r["epochs"]) for r in rungs]
        for key in ("val_accuracy", "val_loss", "train_loss"):
            assert history(client, child.info.run_id, key) == [
                (s, pytest.approx(r[key])) for s, r in zip(steps, rungs, strict=True)]
        assert history(client, child.info.run_id, "members") == [
            (s, len(packs[r["pack_id"]]["members"])) for s, r in zip(steps, rungs, strict=True)]
        assert [v for _, v in history(client, child.info.run_id, "peak_rss_mb")] == [
            pytest.approx(packs[r["pack_id"]]["peak_rss_mb"]) for r in rungs]
        assert all(v > 0 for _, v in history(client, child.info.run_id, "member_memory_mb"))
    assert {c.info.status for c in children} >= {"FINISHED", "KILLED"}

    n = len(results["packs"])
    assert history(client, pid, "members") == [
        (i, len(p["members"])) for i, p in enumerate(results["packs"])]
    for key in ("step_time_ms", "peak_rss_mb", "pack_memory_mb", "switch_overhead_s"):
        assert [s for s, _ in history(client, pid, key)] == list(range(n))
    running = [v for _, v in history(client, pid, "best_so_far_val_accuracy")]
    assert running == sorted(running) and running[-1] == pytest.approx(best)
    anytime = results["anytime"]  # the same curve against the epochs spent
    assert history(client, pid, "epochs_spent") == [
        (i, pytest.approx(a["epochs"])) for i, a in enumerate(anytime)]
    assert sorted(history(client, pid, "best_so_far_by_epochs")) == sorted(
        (round(a["epochs"]), a["best"]) for a in anytime)
    assert anytime[-1]["epochs"] == results["epochs_spent"] == pytest.approx(
        sum(p["epochs_spent"] for p in results["packs"]))
    metrics = parent.data.metrics
    assert metrics["best_val_accuracy"] == pytest.approx(best)
    assert metrics["median_step_time_ms"] > 0 and metrics["max_peak_rss_mb"] > 1
    assert metrics["wall_time_s"] == pytest.approx(results["wall_time_s"], abs=0.01)
    expected = speedup(results)
    assert expected, "R=9 under knn has singleton packs to estimate from"
    assert metrics["speedup_vs_sequential_estimate"] == pytest.approx(
        expected["speedup_vs_sequential_estimate"])
    rss = history(client, pid, "host_rss_mb")
    assert rss and all(v > 0 for _, v in rss)
    assert [s for s, _ in rss] == list(range(len(rss)))

    artifacts = {a.path for a in client.list_artifacts(pid)}
    assert {"config.yaml", "results.json", "plan.json", "packing", "plots"} <= artifacts
    assert {a.path for a in client.list_artifacts(pid, "plots")} == {
        "plots/timeline.png", "plots/best_so_far.png"}
    rungs = {(p["bracket"], p["rung"]) for p in results["packs"]}
    assert {a.path for a in client.list_artifacts(pid, "packing")} == {
        f"packing/b{s}-r{r}.json" for s, r in rungs}
    for name in ("timeline.png", "best_so_far.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")


@pytest.mark.tf
def test_the_experiment_opens_on_training_runs_with_dataset_and_source(tmp_path):
    """MLflow 3's UI: the experiment kind, the Dataset column and the Source column."""
    _, results, _ = tune(tmp_path, "experiment=quick", trainer=FakeTrainer(failing=""))
    client, [parent], children = store(tmp_path)
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    cfg = compose_config(["experiment=quick"])
    fit_dataset_to_model(cfg)
    arrays = instantiate(cfg.dataset)
    for run_ in (parent, *children):
        assert run_.data.tags["mlflow.source.name"] == "python -m packexp"
        assert run_.data.tags["mlflow.source.type"] == "LOCAL"
        inputs = {i.tags[0].value: i.dataset for i in run_.inputs.dataset_inputs}
        assert sorted(inputs) == ["training", "validation"]
        for context, x, y in (("training", arrays.x_train, arrays.y_train),
                              ("validation", arrays.x_val, arrays.y_val)):
            logged = inputs[context]
            assert (logged.name, logged.source_type) == ("digits", "code")
            assert json.loads(logged.profile)["features_shape"] == list(x.shape)
            assert json.loads(logged.profile)["targets_shape"] == list(y.shape)
        assert inputs["training"].digest != inputs["validation"].digest
    assert len(children) == len(results["trials"])


@pytest.mark.tf  # MLflow's dataset inputs import TensorFlow where it is installed
def test_a_file_dataset_names_its_path_as_the_source(tmp_path):
    from packexp.data import digits
    from packexp.tracking.mlflow_tracker import dataset_inputs

    [train, _] = dataset_inputs(digits.load(), str(tmp_path / "cifar-10-python.tar.gz"))
    assert train.dataset.source_type == "local"
    assert json.loads(train.dataset.source)["uri"] == str(tmp_path / "cifar-10-python.tar.gz")


@pytest.mark.tf
def test_an_experiment_made_without_a_kind_gets_it(tmp_path):
    from mlflow.tracking import MlflowClient

    (tmp_path / "store").mkdir()
    client = MlflowClient(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    client.create_experiment("packexp", tags={"team": "x"},
                             artifact_location=(tmp_path / "artifacts").as_uri())
    tune(tmp_path, "experiment=quick", trainer=FakeTrainer(failing=""))
    tags = client.get_experiment_by_name("packexp").tags
    assert (tags["mlflow.experimentKind"], tags["team"]) == ("custom_model_development", "x")


@pytest.mark.tf
def test_a_diverged_trial_ends_failed_never_finished_without_a_score(tmp_path):
    _, results, _ = tune(tmp_path, "experiment=quick", "search_space.params.learning_rate=[1e12]",
                         "search_space.params.optimizer=[sgd]",
                         "search_space.params.activation=[relu]")
    assert {t["status"] for t in results["trials"]} == {"failed"}
    _, [parent], children = store(tmp_path)
    assert parent.info.status == "FINISHED"
    assert len(children) == len(results["trials"])
    for child in children:
        assert (child.info.status, child.data.tags["outcome"]) == ("FAILED", "diverged")
        assert "val_accuracy" not in child.data.metrics


@pytest.mark.tf
def test_tracking_none_still_draws_the_plots(tmp_path):
    _, results, out = tune(tmp_path, "experiment=quick", tracking="none",
                           trainer=FakeTrainer(failing=""))
    assert not (tmp_path / "store").exists()
    for name in ("timeline.png", "best_so_far.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    assert results["packs"][0]["started_s"] <= results["packs"][0]["elapsed_s"]


@pytest.mark.tf
def test_a_deleted_experiment_of_the_same_name_is_restored(tmp_path, caplog):
    tune(tmp_path / "a", "experiment=quick", trainer=FakeTrainer(failing=""))
    client, _, _ = store(tmp_path / "a")
    client.delete_experiment(client.get_experiment_by_name("packexp").experiment_id)
    caplog.set_level(logging.WARNING, logger="packexp.tracking")
    tune(tmp_path / "a", "experiment=quick", run_dir=tmp_path / "b",
         trainer=FakeTrainer(failing=""))
    client, parents, _ = store(tmp_path / "a")
    assert client.get_experiment_by_name("packexp").lifecycle_stage == "active"
    assert len(parents) == 2
    assert "was a deleted MLflow experiment; restored it" in caplog.text


@pytest.mark.tf
@pytest.mark.parametrize(("value", "match"), [
    ("''", r"^tracking\.experiment='': must be a name"),
    ("null", r"^tracking\.experiment=None: must be a name"),
    ("x" * 501, r"^tracking\.experiment='xxxx.*MLflow takes at most 500 characters, not 501"),
    ("[a,b]", r"^tracking\.experiment=\['a', 'b'\]: must be a name"),
])
def test_an_experiment_name_mlflow_rejects_is_a_one_line_config_error(tmp_path, value, match):
    cfg = compose_config(["experiment=quick", "tracking=mlflow", f"tracking.experiment={value}"])
    with pytest.raises(ConfigError, match=match):
        run(cfg, run_dir=tmp_path, trainer=FakeTrainer(failing=""))
    assert not (tmp_path / "results.json").exists()


@pytest.fixture
def in_the_writer(tmp_path, monkeypatch):
    """Runs Python code as the MLflow writer processes the test starts begin: the writer,
    not the test's process, calls MLflow."""
    def patch(code: str) -> None:
        folder = tmp_path / "writer-site"
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(textwrap.dedent(code))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))
        writer_process.close_spare()  # a writer kept from an earlier test is not patched

    yield patch
    writer_process.close_spare()  # nor may a patched one serve a later test


@pytest.mark.tf
@pytest.mark.parametrize("value", ["-1", "abc", "true"])
def test_a_bad_sample_interval_is_a_config_error(tmp_path, value):
    cfg = compose_config(["experiment=quick", "tracking=mlflow",
                          f"tracking.sample_interval_s={value}"])
    with pytest.raises(ConfigError, match=r"^tracking\.sample_interval_s="):
        run(cfg, run_dir=tmp_path, trainer=FakeTrainer(failing=""))


@pytest.fixture
def not_mlflow():
    """An HTTP server on loopback that answers every request with 404."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.tf
def test_a_server_that_is_not_mlflow_fails_at_start_up_in_seconds(tmp_path, not_mlflow):
    cfg = compose_config(["experiment=quick", "tracking=mlflow", f"tracking.uri={not_mlflow}"])
    started = time.monotonic()
    with pytest.raises(TrackingError, match=rf"^tracking\.uri={not_mlflow}: cannot use"):
        run(cfg, run_dir=tmp_path, trainer=FakeTrainer(failing=""))
    assert time.monotonic() - started < 60
    assert not (tmp_path / "results.json").exists()
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.tf
def test_an_artifact_store_failing_at_start_up_leaves_no_run_open(tmp_path, in_the_writer):
    in_the_writer("""
        from mlflow.tracking import MlflowClient

        def refuse(self, *args, **kwargs):
            raise PermissionError("artifact store is read-only")

        MlflowClient.log_text = refuse
    """)
    cfg = compose_config(["experiment=quick", "tracking=mlflow"])
    with open_dict(cfg):
        cfg.tracking.store_dir = str(tmp_path / "store")
    with pytest.raises(TrackingError, match=r"^tracking\.uri=sqlite:.*read-only"):
        run(cfg, run_dir=tmp_path / "run", trainer=FakeTrainer(failing=""))
    _, [parent], children = store(tmp_path)
    assert parent.info.status == "FAILED" and not children


@pytest.mark.tf
def test_an_mlflow_failure_mid_search_is_a_warning_not_the_end(tmp_path, monkeypatch, caplog):
    def broken(self, *args, **kwargs):
        raise ConnectionError("server went away")

    monkeypatch.setattr(MlflowTracker, "_log_trial_rung", broken)
    caplog.set_level(logging.WARNING, logger="packexp.tracking")
    best, results, _ = tune(tmp_path, "experiment=quick", trainer=FakeTrainer(failing=""))
    assert results["best"]["val_accuracy"] == best
    assert "could not log a trial's rung (server went away); the search goes on" in caplog.text
    _, [parent], children = store(tmp_path)
    assert parent.info.status == "FINISHED" and not children


@pytest.mark.tf
def test_interrupted_trial_runs_are_reopened_on_resume(tmp_path, monkeypatch):
    import packexp.runner.ledger as ledger

    original = ledger.Ledger.commit
    done = []

    def finish(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        done.append(1)
        if len(done) == 2:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(ledger.Ledger, "commit", finish)
    with pytest.raises(KeyboardInterrupt):
        tune(tmp_path, trainer=FakeTrainer(failing=""))
    _, [parent], children = store(tmp_path)
    assert parent.info.status == "KILLED"
    interrupted = {c.info.run_name for c in children if c.data.tags["outcome"] == "interrupted"}
    assert interrupted
    assert {c.info.status for c in children if c.info.run_name in interrupted} == {"KILLED"}

    monkeypatch.setattr(ledger.Ledger, "commit", original)
    _, results, _ = tune(tmp_path, "resume=true", trainer=FakeTrainer(failing=""))
    _, [parent], children = store(tmp_path)
    assert parent.info.status == "FINISHED"
    status = {t["trial_id"]: t["status"].upper() for t in results["trials"]}
    assert {c.info.run_name: c.info.status for c in children} == status
    assert "interrupted" not in {c.data.tags["outcome"] for c in children}


def test_resource_sampler_reads_host_rss_and_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: None)
    monkeypatch.setattr(telemetry, "gpu_utilization", lambda index=0: None)
    samples = []  # two samples at least, however late a loaded machine runs the thread
    with telemetry.ResourceSampler(0.02) as sampler:
        assert wait_until(lambda: samples.extend(sampler.drain()) or len(samples) >= 2, 60,
                          every_s=0.02)
    samples += sampler.drain()
    assert not sampler.drain()
    assert all(set(s.metrics()) == {"host_rss_mb"} and s.host_rss_mb > 0 for s in samples)
    assert [s.timestamp_ms for s in samples] == sorted(s.timestamp_ms for s in samples)

    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: (16 * 2**30, 12 * 2**30))
    monkeypatch.setattr(telemetry, "gpu_utilization", lambda index=0: 87.0)
    sample = telemetry.sample_resources()
    assert sample.metrics() == {"host_rss_mb": sample.host_rss_mb,
                                "gpu_memory_used_mb": 4096.0, "gpu_utilization_pct": 87.0}
    with pytest.raises(ValueError, match="interval_s=0"):
        telemetry.ResourceSampler(0)


def speedup(results):
    return speedup_metrics(SearchResult.from_json("run", results))


def test_speedup_estimate_by_hand():
    def trial(trial_id, batch_size, *rungs):
        return TrialRecord(trial_id, {"batch_size": batch_size}, 0, "finished", [
            RungResult(trial_id, 0, i, 1.0, steps, 0.5, 1.0, 1.0, pack_id, None)
            for i, (pack_id, steps) in enumerate(rungs)]).to_dict()

    trials = [trial("a", 20, ("p0", 100), ("p1", 300)), trial("b", 40, ("p0", 50)),
              trial("c", 30, ("p0", 70)), trial("d", 40, ("p2", 50))]
    packs = [PackRecord(pack_id, 0, 0, 1.0, members, steps=steps, train_s=train_s).to_dict()
             for pack_id, members, steps, train_s in [
                 ("p0", ["a", "b", "c"], 100, 0.5),
                 ("p1", ["a"], 200, 0.2),   # 1 ms a step at 20
                 ("p2", ["d"], 50, 0.15)]]  # 3 ms a step at 40
    results = {"trials": trials, "packs": packs, "continue_on_promotion": True}
    # Alone: a 100 steps x 1 ms, b 50 x 3 ms, c 70 x 2 ms (interpolated), plus p1 and p2.
    sequential = 0.1 + 0.15 + 0.14 + 0.2 + 0.15
    got = speedup(results)
    assert got["sequential_train_s_estimate"] == pytest.approx(sequential)
    assert got["packed_train_s"] == pytest.approx(0.85)
    assert got["speedup_vs_sequential_estimate"] == pytest.approx(sequential / 0.85)
    results["continue_on_promotion"] = False  # a promoted trial retrains all 300 steps
    assert speedup(results)["sequential_train_s_estimate"] == pytest.approx(
        sequential + 0.1)
    packs[1]["members"] = packs[2]["members"] = ["a", "d"]
    assert speedup(results) == {}


def pack_record(**fields) -> PackRecord:
    """A pack's record of ``fields``, the rest as an older record reads."""
    return PackRecord.from_dict({"pack_id": "p0", "bracket": 0, "rung": 0, "epochs": 1.0,
                                 "members": [], **fields})


def test_pack_spans_put_a_resumed_session_after_the_first():
    packs = [pack_record(started_s=1.0, elapsed_s=2.0), pack_record(started_s=2.5, elapsed_s=4.0),
             pack_record(started_s=0.5, elapsed_s=1.5),  # the resumed session's clock restarts
             pack_record(elapsed_s=3.0, build_s=0.5, train_s=1.0)]
    assert plots.pack_spans(packs) == [(1.0, 2.0), (2.5, 4.0), (4.5, 5.5), (5.5, 7.0)]


def test_pack_spans_of_overlapping_packs_keep_each_session_on_one_clock():
    """Two workers: a pack published after another may have started before it ended (and
    under ASHA packs are published as they finish). Sessions come from the records."""
    packs = [pack_record(started_s=0.0, elapsed_s=2.0, session=0),
             pack_record(started_s=0.5, elapsed_s=3.0, session=0),  # overlaps the first
             pack_record(started_s=1.0, elapsed_s=1.5, session=0),  # ended before both
             pack_record(started_s=0.2, elapsed_s=1.0, session=1)]
    assert plots.pack_spans(packs) == [(0.0, 2.0), (0.5, 3.0), (1.0, 1.5), (3.2, 4.0)]


def test_anytime_lays_a_resumed_runs_sessions_end_to_end():
    from packexp.events import PackRecord, RungResult, TrialRecord
    from packexp.records.results import anytime

    packs = [PackRecord("p0", 0, 0, 1.0, ["a"], elapsed_s=2.0, epochs_spent=1.0, session=0),
             PackRecord("p1", 0, 0, 1.0, ["b"], elapsed_s=0.5, epochs_spent=1.0, session=1)]
    trials = [TrialRecord(i, {}, 0, rungs=[RungResult(i, 0, 0, 1.0, 10, acc, 0.1, 0.1, p,
                                                      None)])
              for i, acc, p in (("a", 0.5, "p0"), ("b", 0.7, "p1"))]
    assert anytime(trials, packs) == [
        {"pack_id": "p0", "elapsed_s": 2.0, "epochs": 1.0, "best": 0.5},
        {"pack_id": "p1", "elapsed_s": 2.5, "epochs": 2.0, "best": 0.7}]


PHASED = {"build_s": 0.1, "trace_s": 0.2, "train_s": 0.5, "eval_s": 0.05, "checkpoint_s": 0.05,
          "probe_s": 0.3}


def test_phase_segments_by_hand():
    got = plots.phase_segments(pack_record(**PHASED), 1.0, 2.0, free_from=0.5)
    want = [("build_s", 1.0, 0.1), ("trace_s", 1.1, 0.2), ("train_s", 1.3, 0.5),
            ("eval_s", 1.8, 0.05), ("checkpoint_s", 1.85, 0.05), ("other", 1.9, 0.1),
            ("probe_s", 0.7, 0.3)]
    assert [s[0] for s in got] == [w[0] for w in want]
    assert [s[1:] for s in got] == [pytest.approx(w[1:]) for w in want]
    # Clipped to the span, and the probe to the gap before it; zero phases draw nothing.
    got = plots.phase_segments(pack_record(**{**PHASED, "trace_s": 0.0}), 1.0, 1.4,
                               free_from=0.9)
    assert [s[0] for s in got] == ["build_s", "train_s", "probe_s"]
    assert [s[1:] for s in got] == [pytest.approx(w) for w in ((1.0, 0.1), (1.1, 0.3),
                                                              (0.9, 0.1))]
    old_record = pack_record(build_s=0.1, train_s=0.5)
    assert plots.phase_segments(old_record, 1.0, 2.0) == []


def test_the_plots_colour_every_phase_the_search_records():
    from packexp.records.results import PHASES

    assert tuple(plots.PHASE_COLORS) == PHASES


def fake_results(old_second_pack: bool = False) -> dict:
    trial = {"bracket": 0, "hparams": {"batch_size": 32, "optimizer": "sgd"}, "status": "killed"}
    rung = {"rung": 0, "epochs": 1, "steps": 10, "val_loss": 1.0, "train_loss": 1.0}
    trials = [{**trial, "trial_id": t, "rungs": [{**rung, "pack_id": "p0", "val_accuracy": 0.5}]}
              for t in ("a", "b")]
    trials[0]["rungs"].append({**rung, "pack_id": "p1", "val_accuracy": 0.7})
    second = {"build_s": 0.05, "train_s": 0.6} if old_second_pack else {
        **PHASED, "trace_s": 0.0, "probe_s": 0.0, "reused": True}
    packs = [{**PHASED, "pack_id": "p0", "members": ["a", "b"], "epochs": 1, "started_s": 0.5,
              "elapsed_s": 1.5, "bracket": 0, "rung": 0},
             {**second, "pack_id": "p1", "members": ["a"], "epochs": 3, "started_s": 1.5,
              "elapsed_s": 2.3, "bracket": 0, "rung": 0}]
    return {"strategy": "knn", "model": "mlp3", "dataset": "digits", "wall_time_s": 2.5,
            "trials": trials, "packs": packs}


def drawn(fig) -> collections.Counter:
    return collections.Counter(p.get_gid() for p in fig.axes[0].patches if p.get_gid())


def test_the_timeline_splits_each_pack_into_its_phases_on_every_member_row(tmp_path):
    results = SearchResult.from_json(tmp_path, fake_results())
    fig = plots.timeline_figure(results)
    # p0 on two rows: five phases, the rest of its span, the probe before it, an outline;
    # p1 (reused: nothing traced, no probe) on one: four phases, the rest, an outline;
    # the idle half second before p0.
    assert drawn(fig) == {"build_s": 3, "trace_s": 2, "train_s": 3, "eval_s": 3,
                          "checkpoint_s": 3, "other": 3, "probe_s": 2, "pack": 3, "idle": 1}
    train = [p for p in fig.axes[0].patches if p.get_gid() == "train_s"]
    assert sorted(p.get_width() for p in train) == pytest.approx([0.5, 0.5, 0.5])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "train (steps): 1.0 s" in labels
    assert "memory probes (before the pack): 0.3 s" in labels
    # No phases or share recorded at the top level: summed from the packs.
    assert "training 40% of the 2.5 s search; build 0.2, trace 0.2, train 1.0" in (
        fig.axes[0].get_title())
    assert plots.timeline(results, tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")


def test_a_pack_recorded_before_the_phase_timings_draws_as_it_did(tmp_path):
    fig = plots.timeline_figure(SearchResult.from_json(tmp_path,
                                                       fake_results(old_second_pack=True)))
    assert drawn(fig)["train_s"] == 2  # p0's two rows only
    assert len(fig.axes[0].patches) == sum(drawn(fig).values()) + 2  # p1: span, steps
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "training steps (train_s), after the build" in labels


def test_phase_totals_and_train_share_come_from_the_results_or_their_packs(tmp_path):
    results = fake_results(old_second_pack=True)
    result = SearchResult.from_json(tmp_path, results)
    assert plots.phase_totals(result) == {"build_s": 0.15, "trace_s": 0.2, "train_s": 1.1,
                                          "eval_s": 0.05, "checkpoint_s": 0.05, "probe_s": 0.3}
    assert plots.train_share(result) == pytest.approx(1.1 / 2.5)
    results |= {"phases": {"train_s": 2.0}, "train_share": 0.8}
    result = SearchResult.from_json(tmp_path, results)
    assert plots.phase_totals(result)["train_s"] == 2.0
    assert plots.phase_totals(result)["build_s"] == 0.0
    assert plots.train_share(result) == 0.8
    empty = {"trials": [], "packs": [], "wall_time_s": 0.0}
    assert plots.train_share(SearchResult.from_json(tmp_path, empty)) is None


def test_outside_hydra_there_are_no_sweep_tags():
    assert hydra_tags() == {}


@pytest.mark.parametrize("value", ["fast", 1, True])
def test_a_journal_mode_sqlite_does_not_have_is_a_config_error(value):
    with pytest.raises(ValueError, match=r"^journal_mode=.*: must be one of delete, memory"):
        MlflowTracker(journal_mode=value)
