"""A fake device's calibration record (``device``): packs whose times follow given curves
exactly, for the cost model and the strategies that plan on it."""

from __future__ import annotations

import itertools


def device(*, plain=(1e-3, 1e-3, 0.0), fused=None, plain_setup=(0.1, 0.05),
           fused_setup=(0.2, 0.01), build_s=0.02, load_s=0.001, fusion="auto",
           call_s=0.0, evaluate=(0.0, 0.0), checkpoint_s=0.0) -> dict:
    """A calibration record of a fake device whose packs follow the given curves exactly."""
    a, c0, c1 = plain
    packs = []
    for n, b in itertools.product((1, 2, 4, 8), (16, 64)):
        packs.append({"fusion": "off", "xla": False, "batches": [b] * n,
                      "step_s": a + n * (c0 + c1 * b), "call_s": call_s,
                      "setup_s": plain_setup[0] + plain_setup[1] * n,
                      "eval_s": evaluate[0] + evaluate[1] * n})
        if fused and n > 1:
            fa, f0, f1 = fused
            packs.append({"fusion": "on", "xla": False, "batches": [b] * n,
                          "step_s": fa + n * (f0 + f1 * b), "call_s": call_s,
                          "setup_s": fused_setup[0] + fused_setup[1] * n,
                          "eval_s": evaluate[0] + evaluate[1] * n})
    return {"packs": packs, "build_s": build_s, "load_s": load_s,
            "checkpoint_s": checkpoint_s, "chunk_steps": 500,
            "settings": {"fusion": fusion, "misaligned": "mask", "data_sharing": "gather",
                         "jit_compile": "auto", "xla_min_steps": 2000,
                         "fusable": bool(fused)}}
