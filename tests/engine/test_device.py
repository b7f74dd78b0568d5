"""Memory probes kept across runs (``device.probe_dir``): read back for the same facts only,
never trusted when damaged, and a later search plans as the first did without probing."""

from __future__ import annotations

import json
import logging

import pytest

from packexp import telemetry
from packexp.config.device import RUN_PROBES, ProbeFiles, device_capacity_bytes

FACTS = {"device": {"cpu": "x", "gpu": None}, "model": {"width": 64}, "tensorflow": "2.21.0"}
PROBES = {20: (400_000, 16_000_000)}


def kept_once(tmp_path, facts=FACTS) -> ProbeFiles:
    first = ProbeFiles(tmp_path / "run0", tmp_path / "probes", facts)
    first.run_dir.mkdir()
    first.keep(PROBES)
    return first


def test_a_probe_kept_by_one_run_gives_its_factor_to_the_next_for_the_same_facts(tmp_path):
    first = kept_once(tmp_path)
    assert first.summary() == {"source": "measured", "path": str(tmp_path / "run0" / RUN_PROBES)}
    second = ProbeFiles(tmp_path / "run1", tmp_path / "probes", dict(FACTS))
    assert second.read_run() is None  # not a resume: nothing of its own
    assert second.kept_factor() == 16_000_000 / 400_000
    assert json.loads(first.kept_file.read_text())["facts"] == FACTS


@pytest.mark.parametrize("change", [{"tensorflow": "2.22.0"}, {"model": {"width": 128}},
                                    {"device": {"cpu": "y", "gpu": None}}])
def test_other_facts_read_no_kept_probe(tmp_path, change):
    kept_once(tmp_path)
    other = ProbeFiles(tmp_path / "run1", tmp_path / "probes", {**FACTS, **change})
    assert other.kept_factor() is None and other.summary() is None


@pytest.mark.parametrize("damage", ["{not json", '{"key": "KEY", "probes": {}}',
                                    '{"key": "KEY", "probes": {"20": [0, 5]}}',
                                    '{"key": "other", "probes": {"20": [1, 5]}}', "[]"])
def test_a_damaged_or_foreign_kept_file_is_passed_over_with_a_warning(tmp_path, caplog, damage):
    first = kept_once(tmp_path)
    first.kept_file.write_text(damage.replace("KEY", first.key))
    again = ProbeFiles(tmp_path / "run1", tmp_path / "probes", FACTS)
    with caplog.at_level(logging.WARNING, "packexp.config.device"):
        assert again.kept_factor() is None
    assert f"memory probes {first.kept_file}: " in caplog.text and "probing again" in caplog.text
    again.run_dir.mkdir()
    again.keep(PROBES)  # the probe measured instead replaces the damaged file
    assert json.loads(first.kept_file.read_text())["probes"] == {"20": list(PROBES[20])}


def test_a_resume_plans_with_its_own_probes(tmp_path):
    first = kept_once(tmp_path)
    (first.run_dir / RUN_PROBES).write_text(json.dumps({"45": [1, 2]}))
    resumed = ProbeFiles(first.run_dir, tmp_path / "probes", FACTS)
    assert resumed.read_run() == {45: (1, 2)}
    assert resumed.summary() == {"source": "run", "path": str(first.run_dir / RUN_PROBES)}


def test_a_probe_taken_from_the_kept_file_is_not_kept_again(tmp_path):
    first = kept_once(tmp_path)
    kept = first.kept_file.read_bytes()
    second = ProbeFiles(tmp_path / "run1", tmp_path / "probes", FACTS, source="kept",
                        path=first.kept_file)
    second.run_dir.mkdir()
    second.keep({30: (1_000, 40_000)})
    assert json.loads(second.run_file.read_text()) == {"30": [1_000, 40_000]}  # for a resume
    assert first.kept_file.read_bytes() == kept and second.summary()["source"] == "kept"


def test_without_a_probe_dir_only_the_run_keeps_its_probe(tmp_path):
    files = ProbeFiles(tmp_path, None, FACTS)
    files.keep(PROBES)
    assert [p.name for p in tmp_path.iterdir()] == [RUN_PROBES]
    assert files.kept_factor() is None


@pytest.mark.tf
def test_a_later_search_takes_the_kept_probe_only_where_it_would_probe(tmp_path):
    """device.probe=true: the second search plans with the first one's probe, probing
    nothing, and ends alike; device.probe=auto far below the budget: no probe, so the kept
    one is not read and the plan is the estimate's, as with no probe ever kept."""
    from packexp.app.main import run
    from packexp.testing.config import compose_config

    def search(name, *overrides):
        cfg = compose_config(["experiment=quick", "strategy=knn",
                              f"device.probe_dir={tmp_path / 'probes'}", *overrides])
        run(cfg, run_dir=tmp_path / name)
        return json.loads((tmp_path / name / "results.json").read_text())

    def scores(results):  # all but where each run keeps its checkpoints
        return ([(t["trial_id"], t["hparams"], t["status"],
                  [{k: v for k, v in r.items() if k != "checkpoint"} for r in t["rungs"]])
                 for t in results["trials"]],
                [(p["pack_id"], p["members"], p["fused"]) for p in results["packs"]],
                results["best"])

    first, second = search("run0", "device.probe=true"), search("run1", "device.probe=true")
    assert first["memory_probes"]["source"] == "measured"
    assert second["memory_probes"]["source"] == "kept"
    assert sum(p["probe_s"] for p in first["packs"]) > 0
    assert sum(p["probe_s"] for p in second["packs"]) == 0
    assert scores(second) == scores(first)
    auto = search("run2")
    assert auto["memory_probes"] is None and not (tmp_path / "run2" / RUN_PROBES).exists()


# A pack's byte capacity: a share of the GPU's free memory, or the budget on a CPU.

MB = 2**20


def test_on_a_gpu_the_capacity_is_a_share_of_free_memory(monkeypatch):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: (16 * 2**30, 8 * 2**30))
    assert device_capacity_bytes(None, gpu_fraction=0.5)[0] == 4 * 2**30
    assert device_capacity_bytes(100, gpu_fraction=0.5)[0] == 4 * 2**30


def test_the_free_memory_is_the_one_read_before_tensorflow_claimed_it(monkeypatch):
    # TensorFlow maps nearly all free memory at its first GPU allocation.
    readings = iter([(16 * 2**30, 12 * 2**30), (16 * 2**30, 2**20), (16 * 2**30, 2**20)])
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: next(readings))
    monkeypatch.setattr(telemetry, "_free_at_start", None)
    telemetry.note_free_gpu_memory()  # what ``python -m packexp`` does before TensorFlow
    limit, source = device_capacity_bytes(None, gpu_fraction=0.5)
    assert limit == 6 * 2**30
    assert source == "device.gpu_memory_fraction=0.5 of 12288 MB free GPU memory"


def test_a_worker_on_a_share_of_a_gpu_packs_within_its_share(monkeypatch):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: (16 * 2**30, 2**20))
    monkeypatch.setattr(telemetry, "_gpu_cap", None)
    telemetry.cap_gpu_memory(8 * 2**30)  # what a Ray actor with gpus_per_pack=0.5 sets
    limit, source = device_capacity_bytes(None, gpu_fraction=0.5)
    assert limit == 4 * 2**30
    assert "this worker's 8192 MB share" in source


def test_on_a_cpu_the_capacity_is_the_budget(monkeypatch):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: None)
    assert device_capacity_bytes(100, gpu_fraction=0.5)[0] == 100 * MB


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5])
def test_an_impossible_gpu_fraction_is_rejected(monkeypatch, fraction):
    monkeypatch.setattr(telemetry, "gpu_memory", lambda index=0: (16 * 2**30, 8 * 2**30))
    with pytest.raises(ValueError, match="gpu_memory_fraction"):
        device_capacity_bytes(None, gpu_fraction=fraction)
