"""When ``device.probe`` asks for a memory probe: ``auto`` on a CPU's budget of host memory
only where a full pack's estimate reaches it (the headline's first run paid 20 s for a probe
that measured almost nothing), on a GPU where a full pack could come near its memory."""

from __future__ import annotations

import pytest

from packexp.config.device import PROBE_MARGIN, device_capacity_bytes, probe_worth_it

MB = 2**20
CPU = "device.memory_budget_mb=4096"
GPU = "device.gpu_memory_fraction=0.9 of 16.0 GiB free on GPU 0"


@pytest.mark.parametrize("estimate", [1, 40 * MB, 511 * MB])
def test_auto_takes_no_probe_on_a_cpu_where_the_estimate_is_within_the_budget(estimate):
    """MobileNetV2's estimate on digits is tens of MB: 16 times a full pack of it came near
    the 4096 MB budget, and the headline's first run paid 20 s for its probe."""
    assert not probe_worth_it("auto", estimate, 8, 4096 * MB, CPU)


def test_auto_probes_a_cpu_where_a_full_pack_s_estimate_reaches_the_budget():
    assert probe_worth_it("auto", 512 * MB, 8, 4096 * MB, CPU)


def test_auto_probes_a_gpu_only_where_a_full_pack_could_come_near_its_memory():
    limit = 1024 * MB
    near = limit // (8 * PROBE_MARGIN)
    assert probe_worth_it("auto", near, 8, limit, GPU)
    assert not probe_worth_it("auto", near - 1, 8, limit, GPU)


@pytest.mark.parametrize("source", [CPU, GPU])
def test_true_always_probes_and_false_never(source):
    assert probe_worth_it(True, 1, 1, 4096 * MB, source)
    assert not probe_worth_it(False, 4096 * MB, 8, 1, source)


def test_a_cpu_s_capacity_names_the_budget_the_rule_reads(monkeypatch):
    from packexp import telemetry

    monkeypatch.setattr(telemetry, "gpu_budget", lambda: None)
    assert device_capacity_bytes(4096) == (4096 * MB, CPU)
