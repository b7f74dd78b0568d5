"""The MLflow writer's batches on a real sqlite store (tracking/sqlite_store.py): trial runs
written many at once read back as the store's own calls, one at a time, write them; and the
store's transactions do not grow with the trials a hold gathers."""

from __future__ import annotations

import queue

import pytest
from mlflow.tracking import MlflowClient
from sqlalchemy import event

from packexp.tracking.datasets import Split
from packexp.tracking.messages import Call, Failed
from packexp.tracking.mlflow_writer import MlflowWriter

SPLITS = [Split("training", "abcd1234", ("<f4", (80, 4)), ("<i8", (80,))),
          Split("validation", "ef567890", ("<f4", (20, 4)), ("<i8", (20,)))]
T0 = 1_700_000_000_000  # ms
SOURCE = {"mlflow.source.name": "python -m packexp", "mlflow.source.type": "LOCAL",
          "mlflow.user": "someone"}


@pytest.fixture(autouse=True)
def no_git(monkeypatch):
    """The source tags as the writer's warm-up finds them (by git, a process) given here."""
    from packexp.tracking import datasets

    monkeypatch.setattr(datasets, "source_tags", lambda: SOURCE)


def spec(tmp_path, name: str) -> dict:
    return {"uri": f"sqlite:///{tmp_path / name / 'mlflow.db'}", "experiment": "packexp",
            "artifacts": (tmp_path / name / "mlartifacts").as_uri(), "run_name": "search",
            "tags": {"strategy": "knn"}, "params": [("model", "mlp3")], "resume_run_id": None,
            "config_yaml": None, "dataset": "digits", "splits": SPLITS,
            "dataset_source": None, "journal_mode": "wal"}


def rung(trial: str, step: int, t: int, tags: dict | None = None, **metrics: float) -> Call:
    return Call("log_trial_rung", (trial, {"lr": "0.1", "batch_size": "32"},
                                   {"rung": str(step), **(tags or {})},
                                   [(k, v, T0 + t, step) for k, v in metrics.items()], T0 + t),
                "log a trial's rung")


def search(trials: int) -> list[Call]:
    """A search's calls as a tracker makes them: every trial's first rung, half of them
    promoted, cut or finished, a diverged score, a metric logged twice, a tag overwritten, a
    population's member trained on after its end, a Pareto tag after the end, one left open."""
    calls = []
    for i in range(trials):
        t = f"t{i:04d}"
        calls.append(Call("log_rung_plan", ({"packs": [[t]]}, f"packing/p{i}.json"), "plan"))
        calls.append(rung(t, 1, i, val_accuracy=0.5 + i / 1e4, val_loss=float("nan"),
                          params=float("inf")))
        calls.append(Call("log_metrics", ([("best_so_far", 0.5, T0 + i, i)],), "log a pack"))
    for i in range(0, trials - 1, 2):
        t = f"t{i:04d}"
        calls.append(rung(t, 3, trials + i, {"rung": "1", "promoted_from": "0"},
                          val_accuracy=0.7, val_loss=0.3))
        calls.append(rung(t, 3, trials + i, val_accuracy=0.7))  # the same metric again
    for i in range(trials - 1):
        calls.append(Call("end_trial", (f"t{i:04d}", "FINISHED" if i % 2 == 0 else "KILLED",
                                        "completed" if i % 2 == 0 else "cut", T0 + 3 * trials),
                          "end a trial run"))
    calls.append(Call("reopen_trial", ("t0001",), "reopen a member's run"))
    calls.append(rung("t0001", 2, 4 * trials, val_accuracy=0.6))
    calls.append(Call("end_trial", ("t0001", "FINISHED", "completed", T0 + 4 * trials), "end"))
    calls.append(rung("t0000", 3, 4 * trials, {"pareto_front": "true"}))
    calls.append(Call("end", ("FINISHED", T0 + 5 * trials)))  # t<last> still open: interrupted
    return calls


def serve(tmp_path, name: str, calls: list[Call], batched: bool = True) -> tuple[str, int, list]:
    """The calls applied by a writer in this process: its store's uri, the commits made
    after the start, and what it posted back."""
    posted: list = []
    writer = MlflowWriter(posted.append)
    writer._source = SOURCE
    s = spec(tmp_path, name)
    writer.start(s)
    if not batched:
        writer._trials = None
    commits = []
    engine = writer._client._tracking_client.store.engine
    event.listen(engine, "commit", lambda _connection: commits.append(1))
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    for call in [*calls, Call("close", ())]:
        inbox.put(call)
    writer.serve(inbox)
    return s["uri"], len(commits), posted


def read(uri: str) -> dict:
    """Every run of the store as a user meets it, through MLflow's client, ids left out."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("packexp")
    runs = client.search_runs([experiment.experiment_id], max_results=10_000)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    seen = {}
    for r in runs:
        if r is parent:
            continue
        tags = dict(r.data.tags)
        assert tags.pop("mlflow.parentRunId") == parent.info.run_id
        assert r.info.artifact_uri == f"{experiment.artifact_location}/{r.info.run_id}/artifacts"
        seen[r.info.run_name] = {
            "status": r.info.status, "start": r.info.start_time, "end": r.info.end_time,
            "user": r.info.user_id, "lifecycle": r.info.lifecycle_stage,
            "params": r.data.params, "tags": tags,
            "latest": {k: str(v) for k, v in r.data.metrics.items()},  # nan == nan
            "history": {k: sorted((m.step, m.timestamp, str(m.value)) for m in
                                  client.get_metric_history(r.info.run_id, k))
                        for k in r.data.metrics},
            "inputs": sorted((i.dataset.name, i.dataset.digest,
                              tuple((t.key, t.value) for t in i.tags))
                             for i in r.inputs.dataset_inputs)}
    plans = sorted(a.path for a in client.list_artifacts(parent.info.run_id, "packing"))
    return {"trials": seen, "plans": plans, "parent_metrics": parent.data.metrics,
            "parent_status": parent.info.status}


def test_batched_trial_runs_read_back_as_the_stores_own_calls_write_them(tmp_path):
    calls = search(12)
    batched_uri, _, batched_posted = serve(tmp_path, "batched", calls)
    one_by_one_uri, _, posted = serve(tmp_path, "one-by-one", calls, batched=False)
    assert not [m for m in batched_posted + posted if isinstance(m, Failed)]
    batched, one_by_one = read(batched_uri), read(one_by_one_uri)
    assert batched == one_by_one
    trials = batched["trials"]
    assert len(trials) == 12 and len(batched["plans"]) == 12
    assert trials["t0000"]["latest"]["val_accuracy"] == "0.7"  # the later rung's
    assert trials["t0000"]["tags"]["rung"] == "3"  # a tag given again: its last value
    assert trials["t0000"]["tags"]["promoted_from"] == "0"
    assert trials["t0000"]["tags"]["pareto_front"] == "true"
    assert trials["t0001"]["status"] == "FINISHED" and trials["t0001"]["end"] == T0 + 48
    assert trials["t0011"]["tags"]["outcome"] == "interrupted"
    assert trials["t0002"]["history"]["val_accuracy"] == [(1, T0 + 2, "0.5002"),
                                                          (3, T0 + 14, "0.7")]
    assert len(trials["t0003"]["inputs"]) == 2


@pytest.mark.parametrize("trials", [40])
def test_a_holds_transactions_do_not_grow_with_its_trials(tmp_path, trials):
    _, few, _ = serve(tmp_path, "few", search(trials))
    _, many, _ = serve(tmp_path, "many", search(4 * trials))
    _, one_by_one, _ = serve(tmp_path, "one-by-one", search(trials), batched=False)
    assert many == few  # the trial runs of a hold in one transaction, the plans in one copy
    assert one_by_one > 4 * trials  # a transaction a call, without the batches


def test_a_failed_batch_is_reported_for_what_it_held_and_the_search_goes_on(tmp_path,
                                                                             monkeypatch):
    from packexp.tracking import sqlite_store

    def refuse(self):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(sqlite_store.TrialRuns, "_write", refuse)
    uri, _, posted = serve(tmp_path, "failing", search(4))
    failed = [m for m in posted if isinstance(m, Failed)]
    assert failed[0] == Failed("log a trial's rung", "database is locked")
    assert {m.why for m in failed} == {"database is locked"}  # later calls: the store's path
    trials = read(uri)["trials"]
    # The runs the batch held are made again by their later calls, one call each.
    assert sorted(trials) == ["t0000", "t0001"]
    assert trials["t0000"]["tags"]["pareto_front"] == "true"


def test_calls_that_never_pause_are_written_once_their_hold_is_over(tmp_path, monkeypatch):
    from packexp.tracking import writer_batches

    _, held, _ = serve(tmp_path, "held", search(20))  # queued at once: one hold
    monkeypatch.setattr(writer_batches, "HOLD_S", 0.0)  # every hold over at once
    _, over, _ = serve(tmp_path, "over", search(20))
    assert over > 20 > held
