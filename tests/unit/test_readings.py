"""The reading rules agree with tables that show the paper's findings, and only with those."""

from __future__ import annotations

import itertools

import pytest

from packexp.profile import readings
from packexp.profile.readings import AGREES, COLUMN, DIFFERS, FACTORS, INCONCLUSIVE, LABELS, PARTLY


def sweep(x: str, points: dict[int, float], spread: float = 0.01, other: int = 32) -> list:
    key = "batch_size" if x == "num_models" else "num_models"
    return [{x: v, key: other, "impv": i, "impv_low": i - spread, "impv_high": i + spread,
             "status": "ok"} for v, i in points.items()]


@pytest.mark.parametrize("points", [
    {1: 0.0, 2: 0.3, 4: 0.5, 8: 0.52},  # grows, then levels off
    {1: 0.0, 2: 0.2, 4: 0.4, 8: 0.6},   # still rising
    {1: 0.01, 2: 0.3, 4: 0.29, 8: 0.3},  # saturates at 2
])
def test_growth_until_saturation_agrees(points):
    assert readings.read_growth("m", sweep("num_models", points)).verdict == AGREES


@pytest.mark.parametrize(("points", "verdict"), [
    ({1: 0.0, 2: 0.2, 4: 0.2, 8: 0.2}, AGREES),  # saturated from N=2 on: still growth from 1
    ({1: 0.0, 2: 0.1, 4: 0.1, 8: 0.105}, AGREES),
    ({1: 0.1, 2: 0.1, 4: 0.1, 8: 0.1}, DIFFERS),  # positive but flat: no growth
    ({1: 0.0, 2: 0.3, 4: 0.2, 8: 0.1}, PARTLY),  # grows, then falls beyond the noise
    ({1: 0.0, 2: -0.1, 4: -0.2}, DIFFERS),  # never pays
    ({1: 0.0, 2: 0.3, 4: 0.1, 8: 0.4}, DIFFERS),  # falls on the way up
    ({1: 0.0, 2: 0.015, 4: 0.01}, DIFFERS),  # within the noise
])
def test_growth_rule_reads_what_the_finding_says(points, verdict):
    assert readings.read_growth("m", sweep("num_models", points)).verdict == verdict


def test_positive_impv_alone_is_not_growth():
    """The old rule said "agrees" whenever IMPV > 0 at every N >= 2."""
    rows = sweep("num_models", {1: 0.08, 2: 0.08, 4: 0.09, 8: 0.08}, spread=0.02)
    assert readings.read_growth("m", rows).verdict == DIFFERS


def test_growth_noise_is_each_rows_range():
    rows = sweep("num_models", {1: 0.0, 2: 0.05, 4: 0.08}, spread=0.1)
    assert readings.read_growth("m", rows).verdict == DIFFERS
    rows = sweep("num_models", {1: 0.0, 2: 0.05, 4: 0.08}, spread=0.01)
    assert readings.read_growth("m", rows).verdict == AGREES


def test_the_model_name_comes_from_the_caller():
    rows = sweep("num_models", {1: 0.0, 2: 0.2, 4: 0.3})
    text = str(readings.read_growth("mobilenet (MobileNetV2)", rows))
    assert text.startswith("**mobilenet (MobileNetV2):**")
    assert "MLP-3" not in text
    mlp = str(readings.read_growth("MLP-3", rows, paper_best=0.8))
    assert "the paper's up to 80.0% for this model on a GPU" in mlp


def test_growth_with_one_point_is_inconclusive():
    rows = [*sweep("num_models", {1: 0.0}),
            {"num_models": 2, "batch_size": 32, "status": "out_of_memory"}]
    finding = readings.read_growth("m", rows)
    assert finding.verdict == INCONCLUSIVE
    assert "N=2 on the memory limit" in finding.text


@pytest.mark.parametrize(("points", "verdict", "words"), [
    ({32: 0.3, 64: 0.36, 100: 0.29}, AGREES, "changes little"),
    ({32: 0.3, 64: 0.31, 100: 0.29}, AGREES, "within twice the noise"),
    ({32: 0.5, 64: 0.3, 100: 0.1}, DIFFERS, "falls steadily"),
    ({32: 0.1, 64: 0.3, 100: 0.5}, DIFFERS, "rises steadily"),
    ({32: 0.1, 64: 0.5, 100: 0.1}, DIFFERS, "without a trend"),
])
def test_batch_size_rule(points, verdict, words):
    finding = readings.read_batch("m", sweep("batch_size", points, other=2))
    assert (finding.verdict, words in finding.text) == (verdict, True)


def ablation(effects: dict[str, float], base: float = 0.2, spread: float = 0.01) -> list[dict]:
    """Every combination of the five factors, IMPV additive in each factor's effect."""
    rows = []
    for values in itertools.product((True, False), repeat=len(FACTORS)):
        combo = dict(zip(FACTORS, values, strict=True))
        impv = base + sum(effects.get(f, 0.0) * (0.5 if combo[f] else -0.5) for f in FACTORS)
        rows.append({**{COLUMN[f]: combo[f] for f in FACTORS}, "impv": impv,
                     "impv_low": impv - spread, "impv_high": impv + spread, "status": "ok",
                     "pack_faster": impv > 0, "members": "a + b"})
    return rows


def read(rows):
    return readings.read_ablation("m", rows, {f: COLUMN[f] for f in FACTORS}, LABELS)


def test_the_papers_ablation_agrees():
    finding = read(ablation({"data": 0.3, "batch_size": 0.2, "model": 0.1, "optimizer": 0.05,
                             "preprocess": -0.02}))
    assert finding.verdict == AGREES
    order = [f for f in ("data", "batch size", "model", "optimizer", "preprocess")
             if f in finding.text]
    assert len(order) == 5  # every factor shown
    positions = [finding.text.index(f"{f} ") for f in ("data", "batch size", "model",
                                                        "optimizer")]
    assert positions == sorted(positions)  # in the order of the effects


def test_factors_against_the_paper_are_shown_and_change_the_verdict():
    """The case the old rule called "agrees": a different model and optimizer pack better."""
    finding = read(ablation({"data": 0.3, "batch_size": 0.2, "model": -0.1,
                             "optimizer": -0.05}))
    assert finding.verdict == PARTLY
    assert "model -10.0 points (different packed better, against the paper)" in finding.text
    assert "optimizer -5.0 points (different packed better, against the paper)" in finding.text


def test_data_against_the_paper_differs():
    finding = read(ablation({"data": -0.2, "batch_size": 0.2}))
    assert finding.verdict == DIFFERS


def test_data_and_batch_size_must_lead_the_order():
    finding = read(ablation({"data": 0.1, "batch_size": 0.1, "model": 0.3}))
    assert finding.verdict == PARTLY
    assert "do not lead the order" in finding.text


def test_a_slowdown_counts_only_beyond_the_noise():
    near = read(ablation({"data": 0.3, "batch_size": 0.2}, base=0.15, spread=0.2))
    assert "0 of 32 combinations pack slower beyond the noise" in near.text
    far = read(ablation({"data": 0.3, "batch_size": 0.2}, base=-0.5, spread=0.01))
    assert "of them with the same data, against the paper" in far.text
    assert far.verdict != AGREES


@pytest.mark.parametrize(("swoh", "verdict"), [(10.0, AGREES), (50.0, DIFFERS), (-1.0, AGREES)])
def test_switch_share(swoh, verdict):
    row = {"te_seq_s": 100.0 + swoh, "swoh_s": swoh, "te_single_sum_s": 100.0, "epochs": 1}
    finding = readings.read_switch("m", row, (133, 61, 11))
    assert finding.verdict == verdict
    if verdict == DIFFERS:
        assert "epochs per switch" in finding.text
