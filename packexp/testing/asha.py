"""The ASHA paper's promotion rule (Li et al. 2020, Algorithm 2), transcribed, as a check on
what a search journaled: for the tests of ``scheduler=asha`` in one process and on Ray."""

from __future__ import annotations

import math

from packexp.schedulers import promotable


def get_job(rungs: list[list[tuple[str, float]]], promoted: list[set[str]], eta: int):
    """Li et al. 2020, Algorithm 2, ``get_job``, transcribed: for k from the rung below the top
    down to 0, candidates = top_k(rung k, |rung k| / eta), promotable = candidates not yet
    promoted; the first promotable one is promoted (to k + 1), else a new configuration is
    drawn (returned as None here)."""
    for k in range(len(rungs) - 2, -1, -1):
        ranked = sorted(rungs[k], key=lambda result: -result[1])  # sorted() is stable
        candidates = [t for t, _ in ranked[:math.floor(len(rungs[k]) / eta)]]
        chosen = [t for t in candidates if t not in promoted[k]]
        if chosen:
            promoted[k].add(chosen[0])
            return chosen[0], k + 1
    return None


def assert_promotions_follow_the_rule(records: list[dict], eta: int, rungs: int) -> None:
    """Every member of every plan above rung 0 was promotable by the paper's rule, from the
    results journaled before the plan, when the plan was made."""
    seen: list[list[tuple[str, float]]] = [[] for _ in range(rungs)]
    promoted: list[set[str]] = [set() for _ in range(rungs - 1)]
    for r in records:
        if r["event"] == "result":
            seen[r["rung"]].append((r["trial_id"], r["val_accuracy"]))
        elif r["event"] == "plan" and r["rung"] > 0:
            members = [i for p in r["packs"] for i in p]
            ready = {t for t, k in promotable(seen, promoted, eta) if k == r["rung"]}
            assert set(members) <= ready, (r["key"], members, ready)
            promoted[r["rung"] - 1].update(members)
    assert any(promoted), "nothing was promoted"
