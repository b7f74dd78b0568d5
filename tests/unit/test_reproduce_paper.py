"""scripts/reproduce_paper.py's models: one experiment file each, and the commands it runs."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packexp.testing.config import CONF_DIR, compose_config

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_paper.py"
spec = importlib.util.spec_from_file_location("reproduce_paper", SCRIPT)
reproduce = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = reproduce  # dataclasses look their module up by name
spec.loader.exec_module(reproduce)

FILES = sorted(Path(CONF_DIR, "experiment").glob("paper_profile_*.yaml"))
MODELS = [p.stem.removeprefix("paper_profile_") for p in FILES]


def test_the_models_are_the_experiment_files_in_the_papers_order():
    order = {m: OmegaConf.load(p).paper.order for m, p in zip(MODELS, FILES, strict=True)}
    assert sorted(reproduce.SETUPS) == sorted(MODELS)
    assert list(reproduce.SETUPS) == sorted(MODELS, key=order.get)
    assert list(reproduce.SETUPS) == ["mlp3", "mobilenet", "resnet50", "densenet121"]


@pytest.mark.parametrize(("model", "path"), zip(MODELS, FILES, strict=True))
def test_a_setup_is_its_files_paper_key(model, path):
    paper = OmegaConf.load(path).paper
    setup = reproduce.SETUPS[model]
    assert setup.experiment == path.stem
    assert (setup.name, setup.label, setup.gpu_only) == (paper.name, paper.label, paper.gpu_only)
    assert list(setup.table2) == list(paper.table2)


def test_a_new_experiment_file_is_a_new_model(tmp_path, monkeypatch):
    for path in FILES:
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "paper_profile_tiny.yaml").write_text(
        "# @package _global_\npaper: {name: Tiny, order: 0, table2: [1, 2, 3], label: tiny,"
        " gpu_only: false, overrides: [profile.steps=1]}\n")
    monkeypatch.setattr(reproduce, "EXPERIMENTS", tmp_path)
    setups = reproduce.read_setups()
    assert list(setups) == ["tiny", *reproduce.SETUPS]
    assert setups["tiny"].profile_overrides("memory") == ("profile.steps=1",)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("profile", reproduce.PROFILES)
def test_every_experiment_composes_with_every_profile(model, profile):
    setup = reproduce.SETUPS[model]
    overrides = setup.profile_overrides(profile)
    # docs/RESULTS.md's "What ran" table lists exactly the profile.* overrides.
    assert all(o.startswith("profile.") for o in overrides)
    cfg = compose_config(["task=profile", f"profile={profile}", f"experiment={setup.experiment}",
                          *overrides])
    expected = OmegaConf.load(Path(CONF_DIR, "model", f"{model}.yaml"))
    assert cfg.model._target_ == expected._target_
    assert cfg.model.get("application") == expected.get("application")
    assert cfg.paper.label == setup.label


@pytest.mark.parametrize("model", MODELS)
def test_every_experiment_composes_alone(model):
    cfg = compose_config([f"experiment=paper_profile_{model}"])
    assert cfg.task == "tune"
    assert set(reproduce.SETUPS[model].per_profile) <= set(reproduce.PROFILES)


def test_mobilenet_runs_are_shorter_and_without_xla():
    setup = reproduce.SETUPS["mobilenet"]
    assert setup.profile_overrides("switch_overhead") == ("profile.xla=[false]",)
    assert setup.profile_overrides("num_models") == (
        "profile.xla=[false]", "profile.num_models=[1,2,4]", "profile.steps=10",
        "profile.warmup_steps=3", "profile.repeats=3")
    cfg = compose_config(["task=profile", "profile=num_models",
                          "experiment=paper_profile_mobilenet",
                          *setup.profile_overrides("num_models")])
    assert (cfg.model.alpha, cfg.dataset.train_size, cfg.dataset.val_size) == (0.35, 512, 64)
    assert (list(cfg.profile.xla), list(cfg.profile.num_models)) == ([False], [1, 2, 4])


def test_run_profile_runs_packexp_with_the_experiment(tmp_path, monkeypatch):
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback\nValueError: boom")

    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce, "OUT", tmp_path / "reproduce")
    monkeypatch.setattr(reproduce.subprocess, "run", fake_run)
    record = reproduce.run_profile("mobilenet", "memory", reproduce.SETUPS["mobilenet"])
    assert commands[0][1:3] == ["-m", "packexp"]
    assert commands[0][3:] == [
        "task=profile", "profile=memory", "experiment=paper_profile_mobilenet",
        "profile.xla=[false]", "profile.batch_sizes=[32,64,100]", "profile.steps=5",
        "profile.warmup_steps=2", "tracking.experiment=reproduce_paper",
        f"hydra.run.dir={tmp_path / 'reproduce' / 'mobilenet' / 'memory'}"]
    assert record["overrides"] == commands[0][3:-1]
    assert record["run_dir"] == "reproduce/mobilenet/memory"
    assert (record["returncode"], record["error"]) == (1, "Traceback\nValueError: boom")


def test_table4_schedule_is_balanced():
    plan = reproduce.table4_schedule([3, 9], ["none", "knn"], ["paper_method", "defaults"])
    assert len(plan) == 8
    assert {(r, s, m) for r, s, m in plan} == {
        (r, s, m) for r in (3, 9) for s in ("none", "knn") for m in ("paper_method", "defaults")}
    firsts = [plan[i][2] for i in range(0, 8, 2)]
    assert firsts.count("paper_method") == firsts.count("defaults")


@pytest.mark.parametrize(("walls", "agree", "flipped"), [
    ({"none": 100, "batch_size": 80, "random": 60, "knn": 50}, 6, []),
    ({"none": 100, "batch_size": 80, "random": 60, "knn": 59}, 5, []),  # a tie within 5%
    ({"none": 50, "batch_size": 80, "random": 60, "knn": 100}, 1,
     ["none beat knn", "random beat knn", "batch_size beat knn", "none beat random",
      "none beat batch_size"]),
])
def test_the_order_of_strategies_against_the_papers(walls, agree, flipped):
    got_agree, pairs, got_flipped = reproduce.order_against_paper(walls)
    assert (got_agree, pairs) == (agree, 6)
    assert sorted(got_flipped) == sorted(flipped)


FAKE_MACHINE = {"cpu": "Test CPU", "onednn": False, "logical_cores": 2, "physical_cores": 2,
                "ram_gb": 8.0, "gpu": None, "python": "3", "os": "test", "tensorflow": "2",
                "keras": "3", "keras-tuner": "1"}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """The script writing under ``tmp_path``, on a fake machine, its searches faked."""
    monkeypatch.setattr(reproduce, "OUT", tmp_path / "reproduce")
    monkeypatch.setattr(reproduce, "DOCS", tmp_path / "docs")
    monkeypatch.setattr(reproduce, "FIGURES", tmp_path / "docs" / "results")
    monkeypatch.setattr(reproduce, "machine", lambda: dict(FAKE_MACHINE))
    (tmp_path / "docs").mkdir()
    calls = []

    def search(r, strategy, method):
        calls.append((r, strategy, method))
        wall = {"none": 30.0, "batch_size": 25.0, "random": 20.0, "knn": 18.0, "cost": 15.0}
        slower = 1.3 if method == "paper_method" else 1.0
        return {"R": r, "strategy": strategy, "method": method, "returncode": 0,
                "wall_time_s": wall[strategy] * slower * r / 3, "best_val_accuracy": 0.9,
                "packs": 4, "load_before": 1.0, "load_after": 1.0, "process_s": 5.0,
                "train_share": 0.4,
                "run_dir": "x"}

    return tmp_path, calls, search


@pytest.mark.process
def test_table4_part_runs_alone_and_renders_beside_the_paper(sandbox):
    tmp_path, calls, search = sandbox
    reproduce.main(["--only", "table4", "--R", "3", "--strategies", "none", "knn", "cost"],
                   searcher=search)
    assert sorted(calls) == sorted((3, s, m) for s in ("none", "knn", "cost")
                                   for m in reproduce.METHODS)
    text = (tmp_path / "docs" / "RESULTS.md").read_text()
    assert " at commit " in text and "oneDNN off" in text
    assert "## Table 4 at digits scale" in text and "### R=3" in text
    assert "| MLP-3 | 9236 | 5260 | 3682 | 3491 | up to 2.6x |" in text
    assert "| paper_method | knn | 23.4 | 1.67x | 0.9 |" in text
    assert "fastest first cost < knn < none" in text
    assert "2 of 1 pairs" not in text and "1 of 1 pairs of the paper's strategies" in text
    assert "the paper's pack against packexp's:** cost 1.30x" in text
    assert "GPU rows pending" in text and "Where this CPU differs" in text
    assert ("The paper's own pack was more than 5% slower than packexp's defaults for cost at "
            "R=3, knn at R=3, none at R=3") in text
    assert "training steps were only 40% to 40% of a search's wall time" in text
    assert "the best of the paper's three here was knn at R=3 under packexp defaults" in text


@pytest.mark.process
def test_a_later_table4_subset_keeps_the_earlier_runs(sandbox):
    tmp_path, _, search = sandbox
    reproduce.main(["--only", "table4", "--R", "3", "--strategies", "none"], searcher=search)
    reproduce.main(["--only", "table4", "--R", "9", "--strategies", "none"], searcher=search)
    text = (tmp_path / "docs" / "RESULTS.md").read_text()
    assert "### R=3" in text and "### R=9" in text
    manifest = json.loads((tmp_path / "reproduce" / "manifest.json").read_text())
    assert len(manifest["table4"]["runs"]) == 4



@pytest.mark.process
def test_results_point_at_the_benchmarks_rather_than_copy_them(sandbox):
    """A figure is written once: BENCHMARKS.md's sections stay there."""
    tmp_path, _, search = sandbox
    (tmp_path / "docs" / "BENCHMARKS.md").write_text(
        "# Pack benchmarks\n\n## Step times, 2026-11-22\n\n| a | 1.0 |\n")
    reproduce.main(["--only", "table4", "--R", "3", "--strategies", "none"], searcher=search)
    text = (tmp_path / "docs" / "RESULTS.md").read_text()
    assert "## Pack benchmarks\n\nRecorded by hand, with their commands and dates, in " \
           "[BENCHMARKS.md](BENCHMARKS.md)." in text
    assert "Step times" not in text and "| a | 1.0 |" not in text

@pytest.mark.slow
def test_table4_runs_real_searches(sandbox, monkeypatch):
    """R=3 (the least that halves) under both methods, each a real `python -m packexp`
    process."""
    tmp_path, _, _ = sandbox
    monkeypatch.setattr(reproduce, "OUT", tmp_path / "reproduce")
    reproduce.main(["--only", "table4", "--R", "3", "--strategies", "none"])
    manifest = json.loads((tmp_path / "reproduce" / "manifest.json").read_text())
    runs = manifest["table4"]["runs"]
    assert len(runs) == 2 and all(r["returncode"] == 0 for r in runs), runs
    assert {r["method"] for r in runs} == set(reproduce.METHODS)
    assert all(0 <= r["best_val_accuracy"] <= 1 and r["wall_time_s"] > 0 for r in runs)
    assert "### R=3" in (tmp_path / "docs" / "RESULTS.md").read_text()


def fake_profile_runner(tmp_path):
    """Writes each profile's CSV as a run would, from synthetic rows."""
    from packexp.profile.readings import COLUMN, FACTORS
    from packexp.profile.tables import write_csv

    def sweep_row(n, b, impv):
        return {"num_models": n, "batch_size": b, "ts_seq_ms": n * 1.0,
                "ts_pack_ms": n * (1 - impv), "impv": impv, "impv_low": impv - 0.01,
                "impv_high": impv + 0.01, "repeats": 6, "seq_xla": "off", "pack_xla": "off",
                "fused": False, "seq_peak_share": 0.5, "pack_peak_share": 0.6,
                "matmul_peak_gflops": 70.0, "status": "ok"}

    def ablation_rows():
        rows = []
        for values in itertools.product((True, False), repeat=len(FACTORS)):
            combo = dict(zip(FACTORS, values, strict=True))
            impv = 0.1 + (0.1 if combo["data"] else -0.1) - (0.05 if combo["model"] else 0)
            rows.append({**{COLUMN[f]: combo[f] for f in FACTORS}, "members": "a + b",
                         "ts_seq_ms": 1.0, "ts_pack_ms": 1 - impv, "impv": impv,
                         "impv_low": impv - 0.01, "impv_high": impv + 0.01,
                         "pack_faster": impv > 0, "status": "ok"})
        return rows

    tables = {
        "num_models": [sweep_row(n, 32, i) for n, i in ((1, 0.0), (2, 0.2), (4, 0.3))],
        "batch_size": [sweep_row(2, b, 0.2) for b in (32, 64)],
        "ablation": ablation_rows(),
        "switch_overhead": [{"num_models": 2, "batch_size": 32, "epochs": 1,
                             "steps_per_epoch": 40, "xla": "off", "te_seq_s": 3.0,
                             "te_single_s": 0.5, "te_single_sum_s": 1.0, "swoh_s": 2.0,
                             "swoh_per_switch_s": 1.0, "te_pack_s": 1.5, "pack_build_s": 1.0,
                             "pack_train_s": 0.5, "ts_single_ms": 12.5,
                             "swoh_per_switch_steps": 80}],
    }

    def run(model, profile, setup):
        run_dir = tmp_path / "runs" / model / profile
        run_dir.mkdir(parents=True)
        rows = tables[profile]
        write_csv(rows, list(rows[0]), run_dir / "profile.csv")
        return {"model": model, "profile": profile, "overrides": [], "wall_s": 1.0,
                "load_before": 1.0, "load_after": 1.0, "returncode": 0,
                "run_dir": str(run_dir)}

    return run


@pytest.mark.process
def test_profile_sections_read_with_the_rules(sandbox):
    tmp_path, _, _ = sandbox
    reproduce.main(["--only", "profiles", "--models", "mlp3", "--profiles", "num_models",
                    "batch_size", "ablation", "switch_overhead"],
                   runner=fake_profile_runner(tmp_path))
    text = (tmp_path / "docs" / "RESULTS.md").read_text()
    assert "**mlp3 (MLP-3):** agrees: IMPV grows with N" in text
    assert "against the paper's up to 80.0% for this model on a GPU" in text
    assert "| 20.0% (19.0 to 21.0) | 50% / 60% |" in text
    assert "float32 matmul peak measured 70 GFLOP/s" in text
    assert "model -5.0 points (different packed better, against the paper)" in text
    assert "**mlp3 (MLP-3):** partly differs: factors" in text
    assert "**mlp3 (MLP-3):** differs: SwOH is 66.7% of Te(Seq)" in text
    assert "Not run yet" in text  # Table 4
