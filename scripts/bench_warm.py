"""What a search costs in a process that has run one before: the default search, ``--runs``
times in one Python process through ``packexp.tune``, beside the same search as a fresh
``python -m packexp`` process.

    python scripts/bench_warm.py [--runs 3] [overrides ...]

A fresh command pays Python's and TensorFlow's start and traces its programs; a later call in
a warm process reuses both (``pack.reuse``: the programs kept by structure, their members'
weights and optimizer state set afresh). This is the bound a resident process would reach,
measured (docs/BENCHMARKS.md, "A search in a warm process"). It prints each call's wall
time, its ``startup_s``, ``wall_time_s``, programs built and trace seconds, and checks that
every call scored as the fresh process did: trial by trial, rung by rung, exactly.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def scores(results: dict) -> dict:
    """Each trial's rungs: epochs, validation accuracy and loss, training loss."""
    return {t["trial_id"]: [(r["rung"], r["epochs"], r.get("val_accuracy"), r.get("val_loss"),
                             r.get("train_loss")) for r in t["rungs"]]
            for t in results["trials"]}


def phases(results: dict, seconds: float) -> dict:
    packs = results["packs"]
    return {"call_s": round(seconds, 2), "startup_s": results.get("startup_s"),
            "search_s": results["wall_time_s"],
            "programs": sum(p.get("programs", 0) for p in packs),
            "trace_s": round(sum(p.get("trace_s", 0) for p in packs), 2),
            "train_s": round(sum(p.get("train_s", 0) for p in packs), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args, overrides = parser.parse_known_args()
    work = Path(tempfile.mkdtemp(prefix="bench_warm_"))
    kept = [f"strategy.calibration_dir={work / 'calibrations'}",
            f"device.probe_dir={work / 'probes'}"]
    if not any(o.startswith("tracking=") and o != "tracking=mlflow" for o in overrides):
        kept.append(f"tracking.store_dir={work / 'store'}")  # the default's MLflow store
    overrides = [*overrides, *kept]
    # The fresh process first: it measures the calibration the warm calls then read back.
    fresh_dir = work / "fresh"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "packexp", *overrides,
                           f"hydra.run.dir={fresh_dir}"], cwd=work, capture_output=True,
                          text=True)
    fresh_s = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"python -m packexp failed:\n{done.stderr[-3000:]}")
    fresh = json.loads((fresh_dir / "results.json").read_text())
    print("fresh process (python -m packexp):", phases(fresh, fresh_s))

    started = time.perf_counter()
    import packexp  # what a resident process would hold: TensorFlow, Keras, Hydra, MLflow

    print(f"import packexp: {time.perf_counter() - started:.2f} s")
    for i in range(args.runs):
        started = time.perf_counter()
        result = packexp.tune(overrides=overrides, run_dir=work / f"warm{i}")
        seconds = time.perf_counter() - started
        same = scores(result.results) == scores(fresh)
        print(f"call {i + 1} in one process:", phases(result.results, seconds),
              "scores as the fresh process's" if same else "SCORES DIFFER")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
