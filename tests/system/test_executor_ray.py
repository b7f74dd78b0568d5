"""``executor=ray``: the same results as ``executor=local``, and faults survived or resumed."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from packexp.testing.processes import describe, free_port, ray_processes, wait_until
from packexp.testing.searches import outcome as scores
from packexp.testing.searches import results_per_trial_and_rung, search

pytest.importorskip("ray")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Plain packs, so results agree bit for bit; knn packs several members without calibrating.
QUICK = ["experiment=quick", "strategy=knn", "pack.fusion=off"]
# Where a check needs no second worker: each of quick's rungs is one pack, so a second would
# add only its start-up (a TensorFlow process) to the run.
ONE_WORKER = "executor.num_workers=1"


def packexp(run_dir: Path, env: dict, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "packexp", *QUICK, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout_s: float = 240) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # its reaper then ends a cluster of its own (a joined
        proc.kill()                    # one ends its job): the timeout alone fails the test
        proc.communicate()
        raise
    return proc.returncode, err


# ``python -m packexp`` whose first pack, on whichever worker trains it, kills its worker
# (SIGKILL) once trained, its files written and nothing handed back: the death lands inside
# a pack however fast the machine trains (a watcher that hunted a busy worker could miss a
# quick search's packs). A marker file makes it happen once per run, on any worker.
DIES_IN_ITS_FIRST_PACK = """
import os, runpy, signal, sys
from pathlib import Path
from packexp.executors import ray as ray_executor

marker = Path(sys.argv[1])


class DiesInItsFirstPack(ray_executor.PackWorker):
    def run_pack(self, job):
        done = super().run_pack(job)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return done
        os.kill(os.getpid(), signal.SIGKILL)


ray_executor.PackWorker = DiesInItsFirstPack
sys.argv = [sys.argv[0], *sys.argv[2:]]
runpy.run_module("packexp", run_name="__main__", alter_sys=True)
"""


def packexp_killing_a_worker(run_dir: Path, env: dict, *overrides: str) -> subprocess.Popen:
    """``packexp(...)`` whose first pack kills its worker; ``run_dir.parent / "killed"``
    exists once it has."""
    return subprocess.Popen(
        [sys.executable, "-c", DIES_IN_ITS_FIRST_PACK, str(run_dir.parent / "killed"), *QUICK,
         *overrides, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def local_scores(tmp_path_factory) -> dict:
    """The quick search with the local executor, run in this process (run(cfg)): what every
    Ray run of it must give."""
    run_dir = tmp_path_factory.mktemp("local") / "run"
    search(run_dir, *QUICK)
    return scores(run_dir)


def test_a_worker_killed_mid_pack_is_replaced_and_its_pack_trained_again(tmp_path, ray_env,
                                                                        local_scores):
    """Two CPU workers on a cluster of the run's own give the results of local, though one
    is killed mid-pack. (Without a kill, on a cluster it joins, the results of local:
    test_ray_workers_stream_a_folder_from_its_paths_as_a_local_run_does, one worker; two
    workers on a joined cluster: test_asha_on_two_workers_keeps_both_busy_and_promotes_by_
    the_rule, which checks their count and ASHA's rule, not local's scores.)"""
    run_dir = tmp_path / "run"
    proc = packexp_killing_a_worker(run_dir, ray_env, "executor=ray", "executor.num_workers=2")
    code, err = finish(proc)
    assert code == 0, err
    assert (tmp_path / "killed").exists()
    assert set(results_per_trial_and_rung(run_dir).values()) == {1}
    assert scores(run_dir) == local_scores
    assert not (run_dir / "attempts").exists()  # checkpoints of retired trials go


def test_retries_spent_stop_the_run_in_one_line_and_resume_finishes_it(tmp_path, ray_env,
                                                                       local_scores):
    run_dir = tmp_path / "run"
    proc = packexp_killing_a_worker(run_dir, ray_env, "executor=ray", ONE_WORKER,
                                    "executor.max_restarts=0", "executor.max_task_retries=0")
    code, err = finish(proc)
    assert (tmp_path / "killed").exists()
    assert code == 2, err
    [line] = [x for x in err.splitlines() if x.startswith("packexp: error:")]
    assert "worker died" in line and "executor.max_task_retries=0" in line
    assert "resume=true" in line
    assert "finished" not in {r["event"] for r in map(
        json.loads, (run_dir / "journal.jsonl").read_text().splitlines())}
    search(run_dir, *QUICK, "executor=local", "resume=true")  # in this process
    assert set(results_per_trial_and_rung(run_dir).values()) == {1}
    assert scores(run_dir) == local_scores


def test_a_killed_driver_leaves_no_ray_behind_and_resumes(tmp_path, request, ray_env,
                                                          local_scores):
    run_dir = tmp_path / "run"
    journal = run_dir / "journal.jsonl"
    # Killed once its first pack is journaled, so the resume continues from the worker's
    # checkpoints. Each pack builds and traces a program of its own (results are the same,
    # bit for bit): with the looped program kept, the quick search's last two packs took a
    # few hundredths of a second, too little for the kill to land in.
    slow = ("pack.loop=off", "pack.reuse=0")
    proc = packexp(run_dir, ray_env, "executor=ray", ONE_WORKER, *slow)
    try:
        assert wait_until(lambda: journal.exists() and '"event": "pack"' in journal.read_text(),
                          180, every_s=0.02)
    finally:  # killed whatever happened: a failed wait must not leave the driver running
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The driver's reaper kills what is left of its cluster at once (packexp/executors/
    # reaper.py). Without it, Ray's agents outlived a SIGKILLed driver by over 60 s under a
    # loaded suite; 10 s is the margin for a loaded machine, and a failure names what is left.
    left = ray_env["RAY_TMPDIR"]
    assert wait_until(lambda: not ray_processes(left), 10), describe(ray_processes(left))
    # Resumed on Ray, on another cluster (the module's; executor keys may differ on a
    # resume): from the killed session's journal and the worker's checkpoints.
    cluster = request.getfixturevalue("ray_cluster")
    code, err = finish(packexp(run_dir, cluster.env, "executor=ray", ONE_WORKER, *slow,
                               f"executor.address={cluster.address}", "resume=true"))
    assert code == 0, err
    assert set(results_per_trial_and_rung(run_dir).values()) == {1}
    results = json.loads((run_dir / "results.json").read_text())
    assert {p["session"] for p in results["packs"]} == {0, 1}  # the killed session's pack kept
    assert scores(run_dir) == local_scores


def test_a_refused_address_is_one_line_naming_the_key(tmp_path, ray_env):
    port = free_port()
    code, err = finish(packexp(tmp_path / "run", ray_env, "executor=ray",
                               f"executor.address=127.0.0.1:{port}"), 120)
    assert code == 2
    [line] = [x for x in err.splitlines() if x.startswith("packexp: error:")]
    assert line.startswith(f"packexp: error: executor.address=127.0.0.1:{port}: ")


def test_a_bad_device_key_found_on_a_worker_is_one_line_naming_it(tmp_path, ray_cluster):
    """No memory budget suits a GPU worker; a CPU worker finds it missing."""
    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU worker needs no memory budget")
    run_dir = tmp_path / "run"
    code, err = finish(packexp(run_dir, ray_cluster.env, "executor=ray", ONE_WORKER,
                               f"executor.address={ray_cluster.address}",
                               "device.memory_budget_mb=null"), 180)
    assert code == 2, err
    [line] = [x for x in err.splitlines() if x.startswith("packexp: error:")]
    assert line.startswith("packexp: error: device.memory_budget_mb=None: a CPU needs ")
    assert "Traceback" not in err
    assert not (run_dir / "results.json").exists()


@pytest.mark.gpu
def test_two_half_gpu_workers_share_one_gpu(tmp_path, ray_env, local_scores):
    from packexp.telemetry import gpu_memory

    run_dir = tmp_path / "run"
    code, err = finish(packexp(run_dir, ray_env, "executor=ray", "executor.gpus_per_pack=0.5",
                               "executor.num_workers=2"))
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    # The same trials in the same packs (GPU kernels need not repeat bit for bit: no scores).
    assert {t["trial_id"] for t in results["trials"]} == set(local_scores["trials"])
    assert [p["members"] for p in results["packs"]] == [m for _, m, *_ in local_scores["packs"]]
    # Each worker plans within its half of the GPU.
    assert 0 < results["capacity"]["bytes"] <= 0.5 * gpu_memory()[0]


AFFINITY = """
import json, sys
from packexp.config import fit_dataset_to_model
from packexp.config.device import facts_here, limit_here
from packexp.executors import PackJob
from packexp.executors.ray import RayExecutor
from packexp.space import Trial
from packexp.config.components import worker_cache
from packexp.testing.config import compose_config

cfg = compose_config(["experiment=quick", "pack.fusion=off", "device.memory_budget_mb=64"])
fit_dataset_to_model(cfg)
cache = worker_cache(cfg)  # the driver's: it trains nothing here
executor = RayExecutor(cfg, sys.argv[1], address=sys.argv[2], num_workers=2).start(cache)
try:
    def job(key, width, first):  # mlp3's activation is runtime data: widths differ
        hparams = {"batch_size": 32, "optimizer": "adam", "learning_rate": 0.01,
                   "activation": "relu", "width": width}
        group = [Trial(f"{key}{i}", hparams, (), seed=first + i) for i in range(2)]
        return PackJob(key, group, 0.05, {t.trial_id: None for t in group})

    out = {"limit": executor.on_device(limit_here, {"memory_budget_mb": 64,
                                                    "gpu_memory_fraction": 0.9}),
           "facts": executor.on_device(facts_here).tags()}
    relu, tanh = job("a", 16, 1), job("b", 32, 3)
    first = [run for _, runs in executor.run([relu, tanh]) for run in runs]
    out["first_reused"] = [run.reused for run in first]
    out["kept"] = sorted(map(str, executor.view().kept))
    out["keys"] = sorted(map(str, [cache.key(relu.group), cache.key(tanh.group)]))
    # Both workers are free: the tanh pack's structure is kept by the second only.
    [(_, [again])] = list(executor.run([job("c", 32, 5)]))
    out["again_reused"] = again.reused
    out["driver_built"] = cache.misses + cache.hits
finally:
    executor.close()
print(json.dumps(out))
"""


def test_packs_go_to_the_worker_that_keeps_their_structure(tmp_path, ray_cluster):
    proc = subprocess.run([sys.executable, "-c", AFFINITY, str(tmp_path), ray_cluster.address],
                          cwd=ROOT, env=ray_cluster.env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["limit"] == [64 * 2**20, "device.memory_budget_mb=64"]
    assert out["facts"]["device.cpu"]
    assert out["first_reused"] == [False, False]
    assert out["kept"] == out["keys"]  # the two workers' caches, merged
    assert out["again_reused"] is True  # dispatched by affinity, not to the first free worker
    assert out["driver_built"] == 0


STRAGGLER = """
import json, os, sys, time
from pathlib import Path
from packexp.config.components import worker_cache
from packexp.config import fit_dataset_to_model
from packexp.executors import PackJob
from packexp.executors import ray as ray_executor
from packexp.space import Trial
from packexp.testing.config import compose_config

marker, slow, timeout_s = Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
address = sys.argv[5] or None  # empty: a cluster of the run's own


class Straggler(ray_executor.PackWorker):
    \"\"\"Slow to start (a loaded node): the second actor to start, or every actor.\"\"\"

    def __init__(self, *args):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            first = True
        except FileExistsError:
            first = False
        if slow == "broken" and not first:
            raise RuntimeError("a broken node")
        if slow == "all" or not first:
            time.sleep(300)  # longer than any run here: close() ends it
            marker.with_suffix(".slept").touch()
        super().__init__(*args)


ray_executor.PackWorker = Straggler
cfg = compose_config(["experiment=quick"])
fit_dataset_to_model(cfg)
executor = None
try:
    executor = ray_executor.RayExecutor(cfg, sys.argv[1], address=address, num_workers=2,
                                        ready_timeout_s=timeout_s).start(worker_cache(cfg))

    def job(key, seed):
        hparams = {"batch_size": 32, "optimizer": "adam", "learning_rate": 0.01,
                   "activation": "relu", "width": 16}
        return PackJob(key, [Trial(key, hparams, (), seed=seed)], 0.5, {key: None})

    list(executor.run([job("a", 1), job("b", 2)]))
    import ray
    [ready] = executor._ready
    pid = ray.get(executor._actors[ready].pid.remote())
    print(json.dumps({"packs": len(executor._worked),
                      "straggler_ready": marker.with_suffix(".slept").exists(),
                      "priority": os.getpriority(os.PRIO_PROCESS, 0),
                      "worker": os.getpriority(os.PRIO_PROCESS, pid)}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
finally:
    if executor is not None:
        executor.close()
"""


@pytest.mark.parametrize("slow", ["one", "all", "broken"])
def test_no_pack_waits_for_a_worker_slow_to_start(tmp_path, request, slow):
    """A pack is never queued behind a worker still starting (importing TensorFlow, loading
    the data) while a ready one is free: with one worker 300 s late, the ready one trains
    both packs and the run ends before the late one is ready. With none ready within
    ``executor.ready_timeout_s``, the run stops in one line naming it. A worker that dies as
    it starts leaves the others training, with a warning naming its cause. Workers of a
    cluster the run starts train at the driver's priority (the case ``one`` starts its own;
    the others join the module's)."""
    # The ready worker must start within the timeout under a loaded suite (importing
    # TensorFlow took 8 s and more beside a busy core): it is waited for only as long as it
    # takes. Where none can start (all), a short one ends the case sooner (it bounds the
    # placement group's wait too, which takes well under a second on an idle cluster).
    timeout_s = 8 if slow == "all" else 60
    if slow == "one":
        env, address = request.getfixturevalue("ray_env"), ""
    else:
        cluster = request.getfixturevalue("ray_cluster")
        env, address = cluster.env, cluster.address
    proc = subprocess.run([sys.executable, "-c", STRAGGLER, str(tmp_path),
                           str(tmp_path / "first"), slow, str(timeout_s), address],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if slow == "all":
        assert out == {"error": "ExecutorError: executor.ready_timeout_s=8: no worker was "
                                "ready to train in time (2 still waiting for the cluster "
                                "to place them, importing TensorFlow or loading the data); "
                                "raise it for a slow cluster"}
        return
    assert out["packs"] == 2 and out["straggler_ready"] is False, out
    if slow == "broken":
        assert re.search(r"worker [01] died as it started, the others train on: .*a broken "
                         r"node", proc.stderr), proc.stderr[-3000:]
    # Before, the second pack waited in the late worker's queue (it began 7 s after the
    # first ended with a worker 8 s late).
    # Ray's default would lower the worker's priority by 15: a cluster the run starts (one)
    # sets it to the driver's, and so does the module's cluster (broken), as its maker chose.
    assert out["worker"] == out["priority"]


def test_asha_on_two_workers_keeps_both_busy_and_promotes_by_the_rule(tmp_path, ray_cluster):
    """scheduler=asha under Ray, on a cluster started with ``ray start``: as many workers as
    its CPUs (two), packs overlap on them, every promotion follows the paper's rule as the
    results arrived, the budget holds and the idle share is reported."""
    from packexp.runner.journal import Journal
    from packexp.schedulers import Asha
    from packexp.testing.asha import assert_promotions_follow_the_rule

    run_dir = tmp_path / "run"
    # R=9: quick's R=3 search (1.3 s) is shorter than the spread of two actors' start-ups
    # under load, and an actor takes packs only once it is ready.
    code, err = finish(packexp(run_dir, ray_cluster.env, "executor=ray",
                               f"executor.address={ray_cluster.address}", "scheduler=asha",
                               "scheduler.sample_size=2", "scheduler.R=9"))
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    asha = Asha(results["R"], results["eta"])
    workers = results["workers"]
    assert workers["workers"] == 2 and 0 <= workers["idle_fraction"] < 1
    assert asha.max_epochs - 1 < results["epochs_spent"] <= asha.max_epochs
    spans = sorted((p["started_s"], p["elapsed_s"]) for p in results["packs"])
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), "no two packs overlapped"
    records = Journal(run_dir).read()
    assert_promotions_follow_the_rule(records, asha.eta, len(asha.rungs))
    assert max(results_per_trial_and_rung(run_dir).values()) == 1
    assert not (run_dir / "attempts").exists()  # every checkpoint retired with its trial


def test_ray_workers_stream_a_folder_from_its_paths_as_a_local_run_does(tmp_path,
                                                                        ray_cluster):
    """A cluster started with ``ray start``, joined, gives the results of the local run.
    The config carries the folder's path, never its pixels: each worker reads the files
    itself."""
    from packexp.testing.data import photo_folder

    photos = photo_folder(tmp_path / "photos", per_class=12, size=16)
    streamed = ["dataset=image_folder", f"dataset.path={photos}", "dataset.image_size=[8,8]",
                "dataset.cache=none", "dataset.block=16", "model=cnn", "model.width=4",
                "search_space.params.batch_size=[4,6,8]"]
    search(tmp_path / "local", *QUICK, *streamed, "executor=local")  # in this process
    code, err = finish(packexp(tmp_path / "ray", ray_cluster.env, *streamed, "executor=ray",
                               f"executor.address={ray_cluster.address}", ONE_WORKER))
    assert code == 0, err
    assert not (tmp_path / "ray" / "attempts").exists()
    runs = {executor: scores(tmp_path / executor) for executor in ("local", "ray")}
    assert runs["ray"] == runs["local"]
    assert all(rung[3] is not None for t in runs["ray"]["trials"].values() for rung in t[3])


def test_a_search_over_stand_ins_under_ray_gives_local_s_stand_ins_and_full_model(
        tmp_path, ray_env):
    """``surrogate.scale=2`` under Ray: a worker narrows each trial as the driver's local
    run does, so the stand-ins and the full-width transfer score as locally, bit for bit
    (plain packs), and the best handed over is a full-width trial."""
    stand_ins = ("surrogate.scale=2", "surrogate.transfer=2")
    local = tmp_path / "local" / "run"
    local.parent.mkdir()
    search(local, *QUICK, *stand_ins)
    run_dir = tmp_path / "ray" / "run"
    run_dir.parent.mkdir()
    code, err = finish(packexp(run_dir, ray_env, "executor=ray", ONE_WORKER, *stand_ins))
    assert code == 0, err
    assert scores(run_dir) == scores(local)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["best"]["trial_id"].startswith("full-")
    assert len(results["transfer"]["trials"]) == 2
