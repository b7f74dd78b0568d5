"""``executor=ray`` on a cluster of several nodes (``ray.cluster_utils.Cluster`` on loopback)
as a cluster fails: a node lost mid-rung, a node that joins, SIGTERM. Each run ends with the
results of the local run of the same plan."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from packexp.testing.clusters import driver, loopback_cluster
from packexp.testing.processes import wait_until
from packexp.testing.searches import outcome, results_per_trial_and_rung, search

pytest.importorskip("ray")

pytestmark = pytest.mark.slow

# One member per pack (strategy=none), so a rung has packs for two workers at once; plain
# packs, so results agree bit for bit.
PLAN = ["experiment=quick", "strategy=none", "pack.fusion=off"]


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict:
    """The search with the local executor, in this process: what every Ray run must give."""
    run_dir = tmp_path_factory.mktemp("local") / "run"
    search(run_dir, *PLAN, strategy=None)
    return outcome(run_dir)


def finish(proc: subprocess.Popen, timeout_s: float) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out + err


def test_a_node_lost_mid_rung_leaves_its_pack_to_the_others(tmp_path, ray_env, local):
    """Two nodes of one CPU, a worker each. The second node is removed (its raylet and
    workers killed at once) while its worker is inside a pack: that pack is trained again by
    the first node's worker, the search ends 0 within seconds, and its results are the local
    run's. One line says what was lost."""
    with loopback_cluster(ray_env, nodes=2) as cluster:
        [second] = cluster.nodes()
        head = cluster.head.node_id
        run_dir = tmp_path / "run"
        # The second node's worker holds each pack 60 s after training it: the loss lands
        # inside a pack however fast the machine trains. The first node's worker holds its
        # first pack until the second's is ready, so that one takes a pack at all.
        proc = driver(run_dir, cluster, PLAN, tmp_path / "marks", delay=60,
                      slow=second.node_id, gated=head, gate_from=1)
        busy = tmp_path / "marks" / f"{second.node_id}.busy"
        try:
            assert wait_until(lambda: busy.exists() or proc.poll() is not None, 240,
                              every_s=0.05), "the second node's worker never took a pack"
            assert proc.poll() is None, proc.communicate()
        except BaseException:
            proc.kill()
            raise
        lost = time.monotonic()
        cluster.remove_node(second)
        code, output = finish(proc, 240)
        after_loss = time.monotonic() - lost
    assert code == 0, output[-3000:]
    assert after_loss < 120, after_loss  # the rung waited on no worker that could not return
    [line] = [x for x in output.splitlines() if re.search(r"executor: worker \d lost", x)] \
        or [output[-3000:]]
    assert "is trained again by the others" in line, line
    assert set(results_per_trial_and_rung(run_dir).values()) == {1}
    assert outcome(run_dir) == local
    packs = json.loads((run_dir / "results.json").read_text())["packs"]
    # The lost worker's pack was trained again, and published from, the first node.
    assert {p["node"] for p in packs} == {head}, packs
    assert all(p["host"] == "127.0.0.1" and p["worker"] is not None for p in packs)
    assert not (run_dir / "attempts").exists()


def test_a_node_that_joins_mid_search_takes_work(tmp_path, ray_env, local):
    """One node of one CPU, so one worker; a second node joins once the first pack is
    journaled, and its worker trains packs of the same search (num_workers=null follows the
    cluster). The results are the local run's, and each pack names its worker's node."""
    with loopback_cluster(ray_env, nodes=1) as cluster:
        head = cluster.head.node_id
        run_dir = tmp_path / "run"
        journal = run_dir / "journal.jsonl"
        # From its second pack on, the first node's worker holds each pack until the joining
        # node's worker is ready (TensorFlow imported, the data loaded): packs are left for
        # it to take, however slowly it starts.
        proc = driver(run_dir, cluster, PLAN, tmp_path / "marks", gated=head, gate_from=2)
        try:
            assert wait_until(lambda: proc.poll() is not None or (
                journal.exists() and '"event": "pack"' in journal.read_text()), 240, 0.05)
            assert proc.poll() is None, proc.communicate()
            joined = cluster.add_node()
        except BaseException:
            proc.kill()
            raise
        code, output = finish(proc, 300)
    assert code == 0, output[-3000:]
    assert outcome(run_dir) == local
    packs = json.loads((run_dir / "results.json").read_text())["packs"]
    on = {p["worker"]: p["node"] for p in packs}
    assert on.get(1) == joined.node_id, (on, output[-2000:])
    assert on[0] == head
    assert "executor: worker 1 joined on node" in output


def test_a_lost_nodes_idle_workers_take_no_pack(tmp_path, ray_env, local):
    """A node of two workers is lost while one is inside a pack and the other idle. The idle
    one is dead too, though nothing has told the driver yet: it is asked, and leaves the
    pool, before the lost pack is sent again; sent to it, the pack would fail a second time
    and, at executor.max_task_retries=1, stop the run."""
    with loopback_cluster(ray_env, nodes=2, cpus=[1, 2]) as cluster:
        [second] = cluster.nodes()
        head = cluster.head.node_id
        run_dir = tmp_path / "run"
        proc = driver(run_dir, cluster, [*PLAN, "executor.max_task_retries=1"],
                      tmp_path / "marks", delay=60, slow=second.node_id, once=True,
                      gated=head, gate_from=1)
        busy = tmp_path / "marks" / f"{second.node_id}.busy"
        try:
            assert wait_until(lambda: busy.exists() or proc.poll() is not None, 240,
                              every_s=0.05), "the second node's workers never took a pack"
            assert proc.poll() is None, proc.communicate()
        except BaseException:
            proc.kill()
            raise
        cluster.remove_node(second)
        code, output = finish(proc, 240)
    assert code == 0, output[-3000:]
    lost = [x for x in output.splitlines() if re.search(r"executor: worker \d lost", x)]
    assert len(lost) == 2, output[-3000:]  # the busy one, then its idle neighbour
    assert outcome(run_dir) == local
    packs = json.loads((run_dir / "results.json").read_text())["packs"]
    assert head in {p["node"] for p in packs}


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_under_ray_is_one_line_and_the_resume_equals_local(tmp_path, ray_cluster,
                                                                    local, signum, code):
    """On a cluster someone started (``ray start``): SIGTERM (SIGINT) once a pack is
    journaled exits 143 (130) with packexp's one line (no Ray crash dump, no traceback),
    leaves no actor on the cluster (``ray_cluster`` checks), and the resume gives the local
    run's results."""
    run_dir = tmp_path / "run"
    journal = run_dir / "journal.jsonl"
    # Each pack builds and traces its own program (the same numbers, bit for bit): long
    # enough for the signal to land inside the search.
    slow = ("pack.loop=off", "pack.reuse=0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "packexp", *PLAN, *slow, "executor=ray",
         "executor.num_workers=1", f"executor.address={ray_cluster.address}",
         f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert wait_until(lambda: proc.poll() is not None or (
            journal.exists() and '"event": "pack"' in journal.read_text()), 240, 0.02)
        proc.send_signal(signum)
        exit_code, output = finish(proc, 120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert exit_code == code, output[-3000:]
    assert "SIGTERM received" not in output and "Traceback" not in output, output[-3000:]
    [line] = [x for x in output.splitlines() if x.startswith("packexp: interrupted")]
    assert "resume=true" in line and "executor=ray" in line, line
    assert "finished" not in {json.loads(r)["event"] for r in journal.read_text().splitlines()}
    # Resumed here, locally (executor keys may differ on a resume).
    search(run_dir, *PLAN, *slow, "executor=local", "resume=true", strategy=None)
    assert set(results_per_trial_and_rung(run_dir).values()) == {1}
    assert outcome(run_dir) == local
