"""What ``executor=ray`` does when its cluster fails, measured on this machine: a node lost as
the first pack is journaled, and SIGTERM, each against the local run of the same plan.

    PYTHONPATH=. python scripts/ray_faults.py                      # mnist1d at R=27
    PYTHONPATH=. python scripts/ray_faults.py --faults lose --overrides experiment=quick

Each fault runs ``python -m packexp executor=ray`` as a user would, on a cluster of two
one-CPU nodes on loopback (``ray.cluster_utils.Cluster``, ``packexp.testing.clusters``), and
prints its exit status, how long it took after the fault, the lines it printed about it, and
whether its trials equal the local run's (ids, every rung's epochs, steps and scores, the
best). Plans that do not depend on the workers' caches (``strategy=knn``) and plain packs
(``pack.fusion=off``) make the two comparable bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packexp.testing.clusters import driver, loopback_cluster
from packexp.testing.processes import wait_until
from packexp.testing.searches import outcome

DEFAULT = ["dataset=mnist1d", "scheduler.R=27", "strategy=knn", "pack.fusion=off",
           "tracking=none"]


def journaled_pack(run_dir: Path) -> bool:
    journal = run_dir / "journal.jsonl"
    return journal.exists() and '"event": "pack"' in journal.read_text()


def said(output: str) -> list[str]:
    """The lines a user reads about the fault: packexp's warnings and its last words."""
    keys = ("executor: worker", "packexp: interrupted", "packexp: error", "Traceback",
            "SIGTERM received")
    return [line.split("] - ")[-1] for line in output.splitlines() if any(k in line for k in keys)]


def local_run(base: Path, overrides: list[str], env: dict) -> dict:
    run_dir = base / "local"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "packexp", *overrides, f"hydra.run.dir={run_dir}"],
                   cwd=base, env=env, check=True, capture_output=True)
    print(f"local: {time.monotonic() - started:.1f} s", flush=True)
    return outcome(run_dir)


def lose(base: Path, overrides: list[str], env: dict, local: dict) -> None:
    """The second node removed (its processes killed at once) as the first pack record is
    journaled."""
    with loopback_cluster(env, nodes=2) as cluster:
        [second] = cluster.nodes()
        run_dir = base / "lose"
        started = time.monotonic()
        proc = driver(run_dir, cluster, overrides, base / "marks")
        wait_until(lambda: journaled_pack(run_dir) or proc.poll() is not None, 600, 0.02)
        lost = time.monotonic()
        busy = sum(1 for _ in (run_dir / "attempts").glob("*")) if (
            run_dir / "attempts").exists() else 0
        cluster.remove_node(second)
        out, err = proc.communicate(timeout=900)
        ended = time.monotonic()
    report("lose a node", proc.returncode, ended - lost, ended - started, out + err, run_dir,
           local, f"removed {lost - started:.1f} s after the command ({busy} attempt "
           "directories then)")


def sigterm(base: Path, overrides: list[str], env: dict, local: dict) -> None:
    """SIGTERM to the driver once a pack is journaled, then ``resume=true`` on Ray."""
    with loopback_cluster(env, nodes=2) as cluster:
        run_dir = base / "sigterm"
        started = time.monotonic()
        proc = driver(run_dir, cluster, overrides, base / "marks")
        wait_until(lambda: journaled_pack(run_dir) or proc.poll() is not None, 600, 0.02)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
        ended = time.monotonic()
        print(f"SIGTERM: exit {proc.returncode} {ended - sent:.1f} s after the signal; said:",
              flush=True)
        for line in said(out + err):
            print(f"    {line}")
        resumed = driver(run_dir, cluster, [*overrides, "resume=true"], base / "marks")
        out, err = resumed.communicate(timeout=900)
    report("resume after SIGTERM", resumed.returncode, time.monotonic() - ended,
           time.monotonic() - started, out + err, run_dir, local, "")


def report(name: str, code: int, after_s: float, whole_s: float, output: str, run_dir: Path,
           local: dict, note: str) -> None:
    equal = (run_dir / "results.json").exists() and outcome(run_dir) == local
    packs = json.loads((run_dir / "results.json").read_text())["packs"] if (
        run_dir / "results.json").exists() else []
    workers = sorted({(p.get("worker"), (p.get("node") or "")[:8]) for p in packs})
    print(f"{name}: exit {code}, {after_s:.1f} s after the fault, {whole_s:.1f} s in all; "
          f"trials equal to local: {equal}; packs by (worker, node): {workers}"
          + (f"; {note}" if note else ""), flush=True)
    for line in said(output):
        print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", nargs="+", default=["lose", "sigterm"],
                        choices=["lose", "sigterm"])
    parser.add_argument("--overrides", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ray_faults."))
    home = base / "home"
    home.mkdir()
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="rf", dir="/tmp"),
           "HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    print(f"overrides: {' '.join(args.overrides)}; files in {base}", flush=True)
    local = local_run(base, args.overrides, env)
    for fault in args.faults:
        {"lose": lose, "sigterm": sigterm}[fault](base, args.overrides, env, local)


if __name__ == "__main__":
    main()
