"""Memory probes kept across runs (``device.probe_dir``): read back for the same facts only,
never trusted when damaged, and a later search plans as the first did without probing."""

from __future__ import annotations

import json
import logging

import pytest

from packexp.device import RUN_PROBES, ProbeFiles

FACTS = {"device": {"cpu": "x", "gpu": None}, "model": {"width": 64}, "tensorflow": "2.21.0"}
PROBES = {20: (400_000, 16_000_000)}


def kept_once(tmp_path, facts=FACTS) -> ProbeFiles:
    first = ProbeFiles(tmp_path / "run0", tmp_path / "probes", facts)
    first.run_dir.mkdir()
    first.keep(PROBES)
    return first


def test_a_probe_kept_by_one_run_is_read_by_the_next_for_the_same_facts(tmp_path):
    first = kept_once(tmp_path)
    assert first.summary() == {"source": "measured", "path": str(tmp_path / "run0" / RUN_PROBES)}
    second = ProbeFiles(tmp_path / "run1", tmp_path / "probes", dict(FACTS))
    second.run_dir.mkdir()
    assert second.read() == PROBES
    assert second.summary() == {"source": "kept", "path": str(first.kept_file)}
    # The run's own copy, so a resume of it plans with the same probe wherever it runs.
    assert json.loads((second.run_dir / RUN_PROBES).read_text()) == {"20": list(PROBES[20])}


@pytest.mark.parametrize("change", [{"tensorflow": "2.22.0"}, {"model": {"width": 128}},
                                    {"device": {"cpu": "y", "gpu": None}}])
def test_other_facts_read_no_kept_probe(tmp_path, change):
    kept_once(tmp_path)
    other = ProbeFiles(tmp_path / "run1", tmp_path / "probes", {**FACTS, **change})
    other.run_dir.mkdir()
    assert other.read() is None and other.summary() is None


@pytest.mark.parametrize("damage", ["{not json", '{"key": "KEY", "probes": {}}',
                                    '{"key": "KEY", "probes": {"20": [0, 5]}}',
                                    '{"key": "other", "probes": {"20": [1, 5]}}', "[]"])
def test_a_damaged_or_foreign_kept_file_is_passed_over_with_a_warning(tmp_path, caplog, damage):
    first = kept_once(tmp_path)
    first.kept_file.write_text(damage.replace("KEY", first.key))
    again = ProbeFiles(tmp_path / "run1", tmp_path / "probes", FACTS)
    with caplog.at_level(logging.WARNING, "packexp.device"):
        assert again.read() is None
    assert f"memory probes {first.kept_file}: " in caplog.text and "probing again" in caplog.text
    again.run_dir.mkdir()
    again.keep(PROBES)  # the probe measured again replaces the damaged file
    assert json.loads(first.kept_file.read_text())["probes"] == {"20": list(PROBES[20])}


def test_a_resume_reads_its_own_probes_first_and_probe_false_no_kept_ones(tmp_path):
    first = kept_once(tmp_path)
    own = {45: (1, 2)}
    (first.run_dir / RUN_PROBES).write_text(json.dumps({"45": [1, 2]}))
    resumed = ProbeFiles(first.run_dir, tmp_path / "probes", FACTS)
    assert resumed.read(kept=False) == own and resumed.summary()["source"] == "run"
    fresh = ProbeFiles(tmp_path / "run1", tmp_path / "probes", FACTS)
    assert fresh.read(kept=False) is None  # device.probe=false: the estimate alone


def test_without_a_probe_dir_only_the_run_keeps_its_probe(tmp_path):
    files = ProbeFiles(tmp_path, None, FACTS)
    files.keep(PROBES)
    assert [p.name for p in tmp_path.iterdir()] == [RUN_PROBES]


@pytest.mark.tf
def test_a_later_search_reads_the_kept_probe_and_plans_and_scores_as_the_first(tmp_path):
    from packexp.run import run
    from tests.helpers import compose_config

    results = []
    for name in ("run0", "run1"):
        cfg = compose_config(["experiment=quick", "strategy=knn", "device.probe=true",
                              f"device.probe_dir={tmp_path / 'probes'}"])
        run(cfg, run_dir=tmp_path / name)
        results.append(json.loads((tmp_path / name / "results.json").read_text()))
    first, second = results
    assert first["memory_probes"]["source"] == "measured"
    assert second["memory_probes"]["source"] == "kept"
    assert sum(p["probe_s"] for p in first["packs"]) > 0
    assert sum(p["probe_s"] for p in second["packs"]) == 0
    def scores(results):  # all but where each run keeps its checkpoints
        return ([(t["trial_id"], t["hparams"], t["status"],
                  [{k: v for k, v in r.items() if k != "checkpoint"} for r in t["rungs"]])
                 for t in results["trials"]],
                [(p["pack_id"], p["members"], p["fused"]) for p in results["packs"]],
                results["best"])

    assert scores(second) == scores(first)
