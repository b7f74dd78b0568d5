"""results.json unchanged by the typed record: each run kind's (Hyperband, ASHA, PBT, Pareto,
several workers, a budget stop and its resume) as the release before the record was typed
wrote it (``data/results/*.json.gz``, written by d906799), key for key and in order, less the
real clock's figures and the run directory's path. On the simulated executor through the
config: a prediction's clock, the same on every machine, and no TensorFlow.

To write them anew (a change to results.json meant): ``python -m tests.unit.test_results_unchanged``
from the checkout, with the code whose results are the reference."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from packexp.testing.searches import search

DATA = Path(__file__).parent / "data" / "results"
SIMULATED = ("executor=simulated", "tracking=none")
# Each kind: the sessions' overrides, run one after another in one run directory.
KINDS = {
    "hyperband": [()],
    "asha": [("scheduler=asha",)],
    "pbt": [("scheduler=pbt",)],
    "pareto": [("objective=pareto", "objective.metrics.1.name=val_loss")],
    "workers": [("executor.num_workers=4",)],
    "budget-resumed": [("budget.trials=6",), ("budget.trials=12", "resume=true")],
}
# Keys written since the references, each with its value by kind and the key it follows:
# ``ended``, what ended the search: the schedule, but the resume's, which budget.trials=12
# stopped again.
ADDED = {"ended": ({**dict.fromkeys(KINDS, "schedule"), "budget-resumed": "budget.trials"},
                   "stopped")}
# Figures of the real clock (the command's start-up, checkpoint writes, the process's memory).
REAL = {"startup_s", "startup", "real_wall_time_s", "calibration_s", "checkpoint_s",
        "peak_rss_mb", "seconds"}


def comparable(value, run_dir: Path):
    """``value`` less the real clock's figures, with the run directory's path as ``RUN``."""
    if isinstance(value, dict):
        return {k: comparable(v, run_dir) for k, v in value.items() if k not in REAL}
    if isinstance(value, list):
        return [comparable(v, run_dir) for v in value]
    if isinstance(value, str):
        return value.replace(str(run_dir), "RUN")
    return value


# What a rung records besides val_accuracy: since issue 77 (point 8) ``best`` carries each
# that its rung recorded, beside the reference's keys.
RUNG_METRICS = ("val_loss", "train_loss", "val_mse", "val_mae", "val_r2", "params", "flops")


def with_best_metrics(results: dict) -> dict:
    """The reference with its ``best`` carrying its rung's metrics, read from its trials."""
    best = results.get("best")
    if best is None:
        return results
    [trial] = [t for t in results["trials"] if t["trial_id"] == best["trial_id"]]
    [rung] = [r for r in trial["rungs"] if r["epochs"] == best["epochs"]
              and r["val_accuracy"] == best["val_accuracy"]]
    recorded = {k: rung[k] for k in RUNG_METRICS if rung.get(k) is not None}
    assert recorded, "the reference's best rung records metrics beside val_accuracy"
    return {**results, "best": {**best, **recorded, **(rung.get("metrics") or {})}}


def run(kind: str, run_dir: Path) -> dict:
    for overrides in KINDS[kind]:
        results = search(run_dir, *SIMULATED, *overrides)
    return comparable(results, run_dir)


@pytest.mark.parametrize("kind", list(KINDS))
def test_results_json_is_what_the_release_before_the_typed_record_wrote(tmp_path, kind):
    expected = with_best_metrics(
        json.loads(gzip.decompress((DATA / f"{kind}.json.gz").read_bytes())))
    results = run(kind, tmp_path)
    for key, (values, after) in ADDED.items():
        keys = list(results)
        assert keys.index(key) == keys.index(after) + 1, key
        assert results.pop(key) == values[kind], key
        expected.pop(key, None)
    assert list(results) == list(expected)  # the same keys, in the same order
    for key in expected:
        assert results[key] == expected[key], key


if __name__ == "__main__":
    import tempfile

    DATA.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        with tempfile.TemporaryDirectory() as where:
            results = run(kind, Path(where))
        (DATA / f"{kind}.json.gz").write_bytes(
            gzip.compress(json.dumps(results, indent=1).encode(), mtime=0))
        print(kind, len(results["trials"]), "trials", len(results["packs"]), "packs",
              file=sys.stderr)
