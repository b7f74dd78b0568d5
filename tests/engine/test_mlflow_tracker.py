"""What the MLflow UI compares: a parent run's params (the group choices), its name, its memory,
its step-time summary and its headline (best_value first, trials; the runs table's saved view),
read back from the stores of real searches."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from packexp.app.session import job_named
from packexp.records.record import PackRecord
from packexp.records.results import pack_metrics, weighted_median
from packexp.testing.command import packexp
from packexp.testing.config import compose_config
from packexp.testing.searches import search_on_fake
from packexp.tracking import run_params

# The choices a default search makes, as `python -m packexp strategy=knn` composes them.
CHOICES = {"strategy": "knn", "model": "mlp3", "dataset": "digits", "scheduler": "hyperband",
           "sampler": "random", "search_space": "table3", "executor": "local",
           "tracking": "mlflow", "device": "auto"}
INSTANTIATION = ("_target_", "_partial_", "_convert_", "_recursive_", "_args_")
SWEEP_R = (3, 4)


@dataclass
class Search:
    """A search's parent run, its trial runs and its ``results.json``."""

    client: Any
    parent: Any
    children: list[Any]
    results: dict

    def history(self, key: str, run: Any = None) -> list[tuple[int, float]]:
        run_id = (run or self.parent).info.run_id
        return [(m.step, m.value) for m in sorted(self.client.get_metric_history(run_id, key),
                                                  key=lambda m: (m.step, m.timestamp))]


def searches_in(store: Path, results: list[Path]) -> list[Search]:
    """The store's searches, in the order of ``results`` (a sweep's, by job number)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("packexp").experiment_id])
    parents = sorted((r for r in runs if "mlflow.parentRunId" not in r.data.tags),
                     key=lambda r: int(r.data.tags.get("job_num", 0)))
    assert len(parents) == len(results)
    return [Search(client, p, [r for r in runs
                               if r.data.tags.get("mlflow.parentRunId") == p.info.run_id],
                   json.loads(path.read_text()))
            for p, path in zip(parents, results, strict=True)]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> list[Search]:
    """``python -m packexp -m scheduler.R=3,4 strategy=knn``: a multirun of two jobs."""
    root = tmp_path_factory.mktemp("ui-sweep")
    out = packexp("-m", f"scheduler.R={','.join(map(str, SWEEP_R))}", "strategy=knn",
                  "tracking=mlflow", f"tracking.store_dir={root / 'store'}",
                  f"hydra.sweep.dir={root / 'multirun'}")
    assert out.returncode == 0, out.stderr[-3000:]
    return searches_in(root / "store", [root / "multirun" / str(job) / "results.json"
                                        for job in range(len(SWEEP_R))])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Search:
    """``packexp.tune(strategy="knn", scheduler={"R": 3})``: the Python path, in this process."""
    import packexp as api

    root = tmp_path_factory.mktemp("ui-tune")
    api.tune(strategy="knn", scheduler={"R": 3}, tracking="mlflow",
             overrides=[f"tracking.store_dir={root / 'store'}"], run_dir=root / "run")
    [search] = searches_in(root / "store", [root / "run" / "results.json"])
    return search


def assert_choices_not_instantiation(params: dict[str, str]) -> None:
    assert {k: params.get(k) for k in CHOICES} == CHOICES
    assert not [k for k in params if k.endswith(INSTANTIATION)]
    assert not [k for k in params if k.split(".")[0] == "profile"]  # a search's, not a profile's
    assert params["model.width"] == "64"


@pytest.mark.slow
def test_a_sweeps_parent_runs_have_the_group_choices_as_params(sweep):
    for search in sweep:
        assert_choices_not_instantiation(search.parent.data.params)
    assert [s.parent.data.params["scheduler.R"] for s in sweep] == [str(r) for r in SWEEP_R]


@pytest.mark.tf
@pytest.mark.slow
def test_packexp_tune_logs_the_group_choices_too(tuned):
    assert_choices_not_instantiation(tuned.parent.data.params)
    # No job: no sweep.
    assert tuned.parent.info.run_name == "knn-s0-mlp3-digits-accuracy-hyperband-R3"


@pytest.mark.slow
def test_runs_of_another_R_and_a_sweeps_jobs_have_names_of_their_own(sweep):
    assert [s.parent.info.run_name for s in sweep] == [
        f"knn-j{job}-s0-mlp3-digits-accuracy-hyperband-R{r}" for job, r in enumerate(SWEEP_R)]


@pytest.mark.slow
def test_memory_on_a_cpu_is_the_process_peak_and_the_members_planned_memory(sweep):
    if any(p["gpu_peak_memory_mb"] is not None for s in sweep for p in s.results["packs"]):
        pytest.skip("the packs trained on a GPU")
    for search in sweep:
        packs, metrics = search.results["packs"], search.parent.data.metrics
        rss = search.history("peak_rss_mb")
        assert [step for step, _ in rss] == list(range(len(packs)))
        assert all(v > 1 for _, v in rss), rss  # Python and TensorFlow: hundreds of MB
        assert metrics["max_peak_rss_mb"] == max(v for _, v in rss)
        assert [v for _, v in search.history("pack_memory_mb")] == [
            pytest.approx(p["planned_cost_mb"]) for p in packs]
        assert not {"peak_memory_mb", "gpu_peak_memory_mb"} & set(metrics)
        member_memory = {}
        for child in search.children:
            assert not {"peak_memory_mb", "gpu_peak_memory_mb"} & set(child.data.metrics)
            assert all(v > 1 for _, v in search.history("peak_rss_mb", child))
            member_memory[child.info.run_name] = [
                v for _, v in search.history("member_memory_mb", child)]
            assert all(v > 0 for v in member_memory[child.info.run_name])
        trials = {t["trial_id"]: t for t in search.results["trials"]}
        for pack in packs:  # a pack's planned memory is its members', each at its rung
            mine = [member_memory[m][next(i for i, r in enumerate(trials[m]["rungs"])
                                          if r["pack_id"] == pack["pack_id"])]
                    for m in pack["members"]]
            assert sum(mine) == pytest.approx(pack["planned_cost_mb"], abs=0.01 * len(mine))


@pytest.mark.gpu
@pytest.mark.tf
@pytest.mark.slow
def test_on_a_gpu_each_pack_logs_the_gpu_memory_it_took(tuned):
    gpu = tuned.history("gpu_peak_memory_mb")
    assert [step for step, _ in gpu] == list(range(len(tuned.results["packs"])))
    assert all(v >= 0 for _, v in gpu) and max(v for _, v in gpu) > 1
    assert all(v > 1 for _, v in tuned.history("peak_rss_mb"))  # the host's, beside it


@pytest.mark.slow
def test_the_parent_run_has_the_median_step_time_of_the_whole_search(sweep):
    for search in sweep:
        metrics = search.parent.data.metrics
        expected = pack_metrics([PackRecord.from_dict(p) for p in search.results["packs"]])
        for key in ("median_step_time_ms", "median_member_step_time_ms"):
            assert metrics[key] == pytest.approx(expected[key])
        per_pack = [v for _, v in search.history("step_time_ms")]
        assert min(per_pack) <= metrics["median_step_time_ms"] <= max(per_pack)


def test_weighted_median_by_hand():
    assert weighted_median([3.0, 1.0, 2.0], [1, 1, 1]) == 2.0
    assert weighted_median([1.0, 10.0], [1, 3]) == 10.0
    assert weighted_median([1.0, 10.0], [1, 1]) == 1.0  # half falls between: the lower
    with pytest.raises(ValueError, match="no values"):
        weighted_median([], [])


def test_pack_metrics_by_hand():
    packs = [PackRecord("p0", 0, 0, 1.0, ["a", "b", "c", "d"], steps=100, step_time_ms=2.0,
                        peak_rss_mb=500.0),
             PackRecord("p1", 0, 1, 3.0, ["a"], steps=300, step_time_ms=1.5, peak_rss_mb=600.0),
             PackRecord("p2", 0, 0, 1.0, ["e"])]  # an old record: nothing timed or read
    # Pack steps: 100 of 2.0 ms and 300 of 1.5 ms. Member steps: 400 of 0.5 ms, 300 of 1.5.
    assert pack_metrics(packs) == {"median_step_time_ms": 1.5,
                                   "median_member_step_time_ms": 0.5, "max_peak_rss_mb": 600.0}
    assert pack_metrics(packs[2:]) == {}


@pytest.mark.tf  # ${default:} reads the model builder's signature, which imports Keras
@pytest.mark.parametrize("task", ["tune", "profile"])
def test_outside_hydra_the_params_name_the_module_chosen(task):
    params = run_params(compose_config(["strategy=knn", f"task={task}"]))
    assert {k: params[k] for k in ("strategy", "model", "dataset", "scheduler", "sampler")} == {
        "strategy": "knn", "model": "mlp3", "dataset": "digits", "scheduler": "hyperband",
        "sampler": "random"}
    assert not [k for k in params if k.endswith(INSTANTIATION)]
    assert (params.get("profile"), "profile.repeats" in params) == (
        ("num_models", True) if task == "profile" else (None, False))


@pytest.mark.tf  # MLflow's dataset inputs import TensorFlow where it is installed
def test_a_parent_leads_with_its_best_value_and_its_experiment_saves_the_runs_table_view(
        tmp_path):
    """On the fake trainer: stopped by a budget of 4 trials, then resumed with 5."""
    from packexp.tracking.mlflow_view import COLUMNS, VIEW_ID, VIEW_NAME, VIEW_PREFIX, column

    track = ("experiment=quick", "tracking=mlflow", f"tracking.store_dir={tmp_path / 'store'}",
             "seed=3")
    first = search_on_fake(tmp_path / "run", *track, "budget.trials=4")
    resumed = search_on_fake(tmp_path / "run", *track, "resume=true", "budget.trials=5")
    [search] = searches_in(tmp_path / "store", [tmp_path / "run" / "results.json"])
    parent = search.parent
    assert parent.info.run_name == "knn-s3-mlp3-digits-accuracy-hyperband-R3"  # quick: R=3
    # The compare view plots the first metric a run logged.
    assert next(iter(parent.data.metrics)) == "best_value"
    values = [v for _, v in search.history("best_value")]
    assert len(values) == 3 and math.isnan(values[0])  # the resume logs no NaN of its own
    assert values[1:] == [pytest.approx(first["best"]["value"]),
                          pytest.approx(resumed["best"]["value"])]
    assert parent.data.metrics["best_value"] == pytest.approx(resumed["best"]["value"])
    assert [v for _, v in search.history("trials")] == [len(first["trials"]),
                                                      len(resumed["trials"])] == [3, 5]

    tags = search.client.get_experiment(parent.info.experiment_id).tags
    view = json.loads(tags[VIEW_PREFIX + VIEW_ID])
    assert view["name"] == VIEW_NAME
    state = json.loads(view["state"])
    assert state["selectedColumns"] == [column(kind, key) for kind, key in COLUMNS]
    data = parent.data
    held = {"params": data.params, "metrics": data.metrics, "tags": {**data.tags, "job_num": 0}}
    assert [key for kind, key in COLUMNS if kind != "attributes" and key not in held[kind]] == []
    assert {column("params", "strategy"), column("params", "seed"),
            column("metrics", "best_value")} <= set(state["selectedColumns"])


def test_a_multiruns_job_number_follows_the_names_first_word():
    assert job_named("knn-s0-mlp3-digits", "3") == "knn-j3-s0-mlp3-digits"
    assert job_named("profile-quick-mlp3-digits", "0") == "profile-j0-quick-mlp3-digits"
    assert job_named("knn-s0-mlp3-digits", None) == "knn-s0-mlp3-digits"
    assert job_named("solo", "1") == "solo-j1"


def test_the_view_is_saved_once_and_again_only_when_it_changed():
    from packexp.tracking.mlflow_view import VIEW_PREFIX, view_tags

    [(key, value)] = view_tags({}).items()
    assert key.startswith(VIEW_PREFIX)
    assert view_tags({key: value}) == {}
    stale = json.loads(value) | {"state": "{}"}
    assert list(view_tags({key: json.dumps(stale)})) == [key]
    assert list(view_tags({key: "not json"})) == [key]
