"""Results that scale: a large search's timeline drawn aggregated with as many artists at
10,000 trials as at 2,000, the work per trial counted, a small search's figure still a row
per trial, and ``results.json``, the metrics and the summary read once and unchanged."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from packexp.records import crowd, plots, report
from packexp.records.record import PackRecord, TrialRecord
from packexp.records.search_result import SearchResult

PHASED = {"build_s": 0.01, "trace_s": 0.0, "train_s": 0.05, "eval_s": 0.01,
          "checkpoint_s": 0.005, "probe_s": 0.0}


def large_results(trials: int, workers: int = 0, seed: int = 0) -> dict:
    """An ASHA-like search of ``trials`` trials in packs of two, a third promoted to a
    second rung (a pack of their own, three epochs); every tenth fails there and the rest
    of the first rung is killed. With ``workers``, the packs name their Ray worker."""
    rnd = random.Random(seed)
    records, packs, clock = [], [], 0.0

    def pack(members: list[str], epochs: float) -> str:
        nonlocal clock
        pack_id = f"p{len(packs):05d}"
        started, clock = clock + 0.002, clock + 0.002 + 0.076
        where = {"worker": len(packs) % workers, "host": "h", "node": "n" * 8} if workers else {}
        packs.append({**PHASED, "pack_id": pack_id, "members": members, "epochs": epochs,
                      "bracket": 0, "rung": 0, "steps": 10, "started_s": started,
                      "elapsed_s": clock, "session": 0, **where})
        return pack_id

    for i in range(0, trials, 2):
        ids = [f"t{j:05d}" for j in range(i, min(i + 2, trials))]
        pack_id = pack(ids, 1)
        for trial_id in ids:
            records.append({"trial_id": trial_id, "bracket": 0, "status": "killed",
                            "hparams": {"batch_size": rnd.choice([20, 45, 70]),
                                        "optimizer": "adam"},
                            "rungs": [{"pack_id": pack_id, "rung": 0, "epochs": 1, "steps": 10,
                                       "val_accuracy": rnd.random() / 2, "val_loss": 1.0,
                                       "train_loss": 1.0}]})
    for k, record in enumerate(records[::3]):
        failed = k % 10 == 9
        record["status"] = "failed" if failed else "finished"
        record["rungs"].append({"pack_id": pack([record["trial_id"]], 3), "rung": 1,
                                "epochs": 3, "steps": 30,
                                "val_accuracy": None if failed else 0.5 + rnd.random() / 2,
                                "val_loss": None, "train_loss": None})
    return {"strategy": "knn", "model": "mlp3", "dataset": "digits", "seed": 0,
            "objective": {"metric": "val_accuracy", "mode": "max"}, "wall_time_s": clock,
            "trials": records, "packs": packs}


def artists(fig) -> int:
    return len(fig.findobj())


@pytest.mark.parametrize("workers", [0, 8])
def test_a_large_searchs_timeline_draws_as_many_artists_at_10000_trials_as_at_2000(
        workers, tmp_path):
    small, large = (plots.timeline_figure(SearchResult.from_json(tmp_path,
                                                                 large_results(n, workers)))
                    for n in (2000, 10000))
    assert artists(small) == artists(large) < 600  # ticks included
    area, rows = large.axes
    assert len(rows.get_yticklabels()) == workers + crowd.BEST_ROWS
    assert len(rows.texts) == crowd.BEST_ROWS  # each best trial's value at its best rung
    assert "9,975 trials are not drawn one by one" in area.get_title()
    assert {p.get_gid() for p in area.patches} >= {"build_s", "train_s", "eval_s"}


def test_a_large_searchs_timeline_looks_at_each_pack_once(monkeypatch, tmp_path):
    """The work is linear: one ``phase_segments`` per pack, one score per rung."""
    results = large_results(10000)
    result = SearchResult.from_json(tmp_path, results)
    calls = {"segments": 0, "scores": 0}
    segments, score = crowd.phase_segments, result.tuned_for.score

    def counted_segments(*args, **kwargs):
        calls["segments"] += 1
        return segments(*args, **kwargs)

    class Counted:
        def __init__(self, objective):
            self.objective = objective

        def score(self, result):
            calls["scores"] += 1
            return score(result)

        def __getattr__(self, name):
            return getattr(self.objective, name)

    monkeypatch.setattr(crowd, "phase_segments", counted_segments)
    crowd.crowd_figure(dataclasses.replace(result, tuned_for=Counted(result.tuned_for)))
    assert calls["segments"] == len(results["packs"])
    assert calls["scores"] == sum(len(t["rungs"]) for t in results["trials"])


def test_the_area_holds_every_trials_time_in_each_phase(tmp_path):
    """Summed over the bins, each phase's area is its bars' seconds on every member's row,
    as the row chart draws them."""
    packs = SearchResult.from_json(tmp_path, large_results(1000)).pack_records
    spans = plots.pack_spans(packs)
    segments = crowd.pack_segments(packs, spans)
    edges, counts = crowd.occupancy(packs, segments, spans[-1][1])
    for phase, count in counts.items():
        expected = sum(width * len(p.members)
                       for p, bars in zip(packs, segments, strict=True)
                       for name, _, width in bars if name == phase)
        assert float(np.sum(count * np.diff(edges))) == pytest.approx(expected, rel=1e-9)


def test_the_area_averages_overlapping_packs_over_each_bin():
    packs = [PackRecord("p0", 0, 0, 1.0, ["a", "b"]), PackRecord("p1", 0, 0, 1.0, ["c"])]
    segments = [[("train_s", 0.0, 1.0)], [("train_s", 0.5, 1.0)]]
    edges, counts = crowd.occupancy(packs, segments, 2.0, bins=4)
    assert list(edges) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert list(counts["train_s"]) == pytest.approx([2.0, 3.0, 1.0, 0.0])


def test_the_best_rows_are_the_best_by_the_objective_best_first(tmp_path):
    results = large_results(400)
    results["objective"] = {"metric": "val_accuracy", "mode": "min"}
    best = crowd.best_trials(SearchResult.from_json(tmp_path, results), k=3)
    lowest = sorted((min(r["val_accuracy"] for r in t["rungs"] if r["val_accuracy"] is not None),
                     t["trial_id"]) for t in results["trials"])[:3]
    assert [(r.val_accuracy, t.trial_id) for t, r in best] == lowest


def test_a_search_is_aggregated_past_max_rows_trials_or_max_packs_packs(tmp_path):
    def crowded(results: dict) -> bool:
        return crowd.crowded(SearchResult.from_json(tmp_path, results))

    assert not crowded(large_results(crowd.MAX_ROWS))
    assert crowded(large_results(crowd.MAX_ROWS + 1))
    few = large_results(10)
    assert crowded(few | {"packs": few["packs"][:1] * (crowd.MAX_PACKS + 1)})


def test_a_small_searchs_timeline_is_a_row_per_trial_as_before(tmp_path):
    """17 trials (the default search's count): one axes, a row per trial in the order they
    first trained, a value at each scored rung, no aggregate."""
    results = large_results(17)
    fig = plots.timeline_figure(SearchResult.from_json(tmp_path, results))
    (ax,) = fig.axes
    ticks = [t.get_text().split()[0] for t in ax.get_yticklabels()]
    assert ticks == [t["trial_id"] for t in results["trials"]]
    values = sum(r["val_accuracy"] is not None for t in results["trials"] for r in t["rungs"])
    assert len([t for t in ax.texts if t.get_color() == "dimgray"]) == values
    assert "not drawn one by one" not in ax.get_title()


def test_to_json_is_results_json_unchanged_and_a_copy():
    made = large_results(50) | {"capacity": {"bytes": 1, "max_members": (2, 3)}}
    results = SearchResult.of(Path("/tmp/unused"), made).to_json()  # as the search writes it
    result = SearchResult.of(Path("/tmp/unused"), results)
    before = copy.deepcopy(results)
    out = result.to_json()
    assert out == before and json.dumps(out, indent=2) == json.dumps(before, indent=2)
    assert out["capacity"]["max_members"] == (2, 3)  # not JSON's: kept as given
    out["trials"][0]["rungs"][0]["val_accuracy"] = -1.0
    out["packs"][0]["members"].append("x")
    assert results == before


def test_the_metrics_and_the_summary_read_the_records_once(monkeypatch, capsys):
    results = large_results(300) | {"best": None, "train_share": 0.5, "prediction_error": None,
                                    "phases": {k: 0.0 for k in PHASED}}
    reads = []
    read = TrialRecord.from_dict
    monkeypatch.setattr(TrialRecord, "from_dict", lambda r: reads.append(1) or read(r))
    result = SearchResult.of(Path("/tmp/unused"), results)
    assert len(reads) == 300  # each trial read once, into its record
    first = result.metrics()
    first["wall_time_s"] = -1.0  # the caller's copy
    assert result.metrics()["wall_time_s"] == results["wall_time_s"]
    report.print_summary(result, None, top_k=3)
    assert "300 trials" in capsys.readouterr().out
    assert len(reads) == 300  # the metrics and the summary read the records, not the JSON
