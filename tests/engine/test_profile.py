"""The profile task: every config composes, each profile runs tiny and writes its CSV and figure."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import open_dict

from packexp.app.main import TASKS, run
from packexp.config import instantiate
from packexp.errors import ConfigError
from packexp.testing.config import CONF_DIR, compose_config

# A profile's ${default:} values are read from its module, which times TensorFlow packs.
pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in Path(CONF_DIR, "profile").glob("*.yaml"))
TINY = ["profile.steps=3", "profile.warmup_steps=1", "profile.repeats=1", "profile.xla=[false]"]
# Per profile: overrides that make it tiny, and numeric columns that must be finite.
CASES = {
    "num_models": (["profile.num_models=[1,2]"], ["ts_seq_ms", "ts_pack_ms", "impv"]),
    "batch_size": (["profile.batch_sizes=[16,32]"], ["ts_seq_ms", "ts_pack_ms", "impv"]),
    "ablation": (["profile.factors=[data,preprocess,batch_size]", "profile.batch_sizes=[8,12]"],
                 ["ts_seq_ms", "ts_pack_ms", "impv"]),
    "memory": (["profile.num_models=[1,2]", "profile.batch_sizes=[16]"],
               ["peak_memory_mb", "process_peak_mb", "estimated_memory_mb"]),
    "switch_overhead": (["profile.repeats=2"],
                        ["te_seq_s", "te_single_sum_s", "swoh_s", "te_pack_s"]),
    # Each worker is a TensorFlow process of ~1 GB resident; the budget leaves room for them.
    "concurrency": (["profile.batch_sizes=[16]", "profile.num_models=[1,2]",
                     "device.memory_budget_mb=32768"],
                    ["ts_concurrent_ms", "ts_pack_ms", "peak_memory_concurrent_mb",
                     "peak_memory_pack_mb"]),
}


def profile_config(name: str, *overrides: str):
    return compose_config(["task=profile", f"profile={name}", "tracking=none", *TINY,
                           *overrides])


def test_every_profile_has_a_case():
    assert set(PROFILES) == set(CASES)
    assert "profile" in TASKS


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_file_composes_and_instantiates(name):
    from packexp.profile.base import Profile

    cfg = compose_config(["task=profile", f"profile={name}"])
    profile = instantiate(cfg.profile, "profile")
    assert isinstance(profile, Profile)
    assert profile.name == name
    assert {"steps", "repeats"} <= set(cfg.profile)


def test_the_default_profile_is_the_papers_figure_4a():
    cfg = compose_config(["task=profile"])
    assert list(cfg.profile.num_models) == [1, 2, 4, 8]
    assert cfg.profile.batch_size == 32
    assert cfg.task == "profile"


@pytest.mark.parametrize(("override", "match"), [
    ("profile.steps=0", r"^profile\.steps=0: must be an integer >= 1$"),
    ("profile.num_models=[]", r"^profile\.num_models=\[\]"),
    ("profile.xla=[maybe]", r"^profile\.xla="),
    ("profile.optimizer=rmsprops", r"^profile\.optimizer='rmsprops'"),
])
def test_bad_knobs_name_the_key(tmp_path, override, match):
    cfg = profile_config("num_models", override)
    with pytest.raises(ConfigError, match=match):
        run(cfg, run_dir=tmp_path)
    assert not (tmp_path / "profile.csv").exists()


@pytest.mark.parametrize("images", [False, True])
def test_png_encoding_in_the_step_decodes_to_the_same_values(images):
    import numpy as np
    import tensorflow as tf

    from packexp.data import digits
    from packexp.profile.ablation import DecodePreprocessing, encode_png

    dataset = digits.load(images=images)
    encoded = encode_png(dataset)
    assert encoded.x_train.dtype == object and len(encoded.x_train) == len(dataset.x_train)
    decode = DecodePreprocessing(shape=tuple(dataset.input_shape))
    batch = tf.constant(encoded.x_train[:6].reshape(2, 3))
    out = decode.evaluation(batch).numpy()
    expected = dataset.x_train[:6].reshape(2, 3, *dataset.input_shape)
    scale = 255.0 if images else 1.0
    np.testing.assert_array_equal(out, expected.astype(np.float32) / scale)


def check_csv(run_dir: Path, name: str) -> list[dict]:
    from packexp.profile.tables import read_csv

    rows = read_csv(run_dir / "profile.csv")
    assert rows, "profile.csv has no rows"
    profile = instantiate(compose_config([f"profile={name}"]).profile, "profile")
    assert list(rows[0]) == list(profile.columns)
    for row in rows:
        for column in CASES[name][1]:
            assert isinstance(row[column], int | float) and math.isfinite(row[column]), (
                column, row)
    png = run_dir / "profile.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILES)
def test_each_profile_runs_tiny(tmp_path, name):
    cfg = profile_config(name, *CASES[name][0])
    objective = run(cfg, run_dir=tmp_path)
    assert isinstance(objective, float)
    rows = check_csv(tmp_path, name)
    statuses = {v for r in rows for k, v in r.items() if k.startswith("status")}
    assert statuses <= {"ok"}


@pytest.mark.slow
def test_num_models_stops_cleanly_at_the_memory_limit(tmp_path):
    cfg = profile_config("num_models", "profile.num_models=[1,2,4]", "device.probe=false")
    with open_dict(cfg):  # room for one member's estimate and a half, not for two
        cfg.device.memory_budget_mb = 0.3
    run(cfg, run_dir=tmp_path)
    from packexp.profile.tables import read_csv

    rows = read_csv(tmp_path / "profile.csv")
    assert [r["num_models"] for r in rows] == [1, 2]
    assert [r["status"] for r in rows] == ["ok", "out_of_memory"]
    assert "device.memory_budget_mb=0.3" in rows[1]["note"]
    assert (tmp_path / "profile.png").exists()


@pytest.mark.slow
def test_concurrency_records_out_of_memory_as_a_result(tmp_path):
    cfg = profile_config("concurrency", "profile.batch_sizes=[16]", "profile.num_models=[1]",
                         "device.memory_budget_mb=64")  # a TensorFlow process alone passes it
    run(cfg, run_dir=tmp_path)
    from packexp.profile.tables import read_csv

    [row] = read_csv(tmp_path / "profile.csv")
    assert row["status_concurrent"] == "out_of_memory"
    assert row["status_pack"] == "out_of_memory"
    assert "device.memory_budget_mb=64" in row["note"]
    assert math.isfinite(row["ts_pack_ms"])


@pytest.mark.slow
def test_cli_profile_of_a_cnn_logs_to_mlflow(tmp_path):
    """python -m packexp task=profile, as a user runs it, with a small CNN: one point,
    a pack of two against each alone (the sweep over points is test_each_profile_runs_tiny's)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = ["task=profile", "profile=num_models", "model=cnn", "model.width=4",
            "dataset=synthetic", "dataset.train_size=64", "dataset.val_size=16",
            "profile.num_models=[2]", "profile.batch_size=8", *TINY,
            f"hydra.run.dir={tmp_path / 'run'}", f"tracking.store_dir={tmp_path}"]
    out = subprocess.run([sys.executable, "-m", "packexp", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    check_csv(tmp_path / "run", "num_models")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run_info] = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string="tags.task = 'profile' and tags.profile = 'num_models'")
    assert run_info.info.status == "FINISHED"
    assert any(k.startswith("impv.") for k in run_info.data.metrics)
    artifacts = {a.path for a in client.list_artifacts(run_info.info.run_id)}
    assert {"profile.csv", "profile.png"} <= artifacts
