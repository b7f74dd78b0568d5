"""Same command, same results (docs/reproducibility.md): a command run twice from a fresh
checkout, the first run measuring its calibration and the second reading it back, gives
identical trials, scores, packs and best, for the default, for ``scheduler=asha`` and for
``executor=ray`` with one worker; and the second run leaves every file it shares with a later
run as it found it, so a third run would meet what the second met."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from packexp.testing.config import ROOT

pytestmark = pytest.mark.slow


def outcome(run_dir: Path) -> dict:
    """``results.json`` but its timings: what a rerun must give again."""
    results = json.loads((run_dir / "results.json").read_text())
    return {"trials": [(t["trial_id"], t["hparams"], t["status"], t["packs"],
                        [(r["rung"], r["epochs"], r["steps"], r["val_accuracy"], r["val_loss"],
                          r["train_loss"]) for r in t["rungs"]]) for t in results["trials"]],
            "packs": [(p["pack_id"], p["members"], p["steps"], p["fused"], p["splits"])
                      for p in results["packs"]],
            "best": results["best"]}


def shared_files(tmp_path: Path, run_dirs: list[Path]) -> dict[str, bytes]:
    """Every file a later run of the command could read: all but the runs' own directories."""
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*"))
            if p.is_file() and not any(d in p.parents for d in run_dirs)}


def two_runs(tmp_path: Path, env: dict, *overrides: str) -> list[dict]:
    """The command run twice with a calibration directory that starts empty."""
    kept, outcomes, sources = tmp_path / "calibration", [], []
    run_dirs = [tmp_path / "run0", tmp_path / "run1"]
    for run_dir in run_dirs:
        done = subprocess.run(
            [sys.executable, "-m", "packexp", *overrides, "tracking=none",
             f"strategy.calibration_dir={kept}", f"hydra.run.dir={run_dir}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        outcomes.append(outcome(run_dir))
        sources.append(json.loads((run_dir / "results.json").read_text())["calibration"])
        if run_dir == run_dirs[0]:
            after_first = shared_files(tmp_path, run_dirs)
    assert [s["source"] for s in sources] == ["measured", "kept"]
    assert len({s["digest"] for s in sources}) == 1
    assert any(name.startswith("calibration") for name in after_first)
    assert shared_files(tmp_path, run_dirs) == after_first  # the kept calibration included
    return outcomes


@pytest.fixture
def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.mark.parametrize("overrides", [(), ("scheduler=asha",)], ids=["default", "asha"])
def test_the_same_command_twice_gives_the_same_results(tmp_path, env, overrides):
    first, again = two_runs(tmp_path, env, *overrides)
    assert first["trials"] and first["best"]
    assert again == first
    if overrides == ("scheduler=asha",):  # drawn without replacement (a finite grid)
        drawn = [json.dumps(t[1], sort_keys=True) for t in first["trials"]]
        assert len(set(drawn)) == len(drawn)


def test_the_same_command_on_one_ray_worker_twice_gives_the_same_results(tmp_path,
                                                                         ray_cluster):
    first, again = two_runs(tmp_path, ray_cluster.env, "executor=ray", "executor.num_workers=1",
                            f"executor.address={ray_cluster.address}")
    assert again == first
