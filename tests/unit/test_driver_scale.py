"""The driver's cost per decision stays flat as trials are drawn (issue 74): the operations a
search makes per trial, counted (never timed), are about the same at four times the trials.
A cost that grows with every trial drawn (a ranking of all results at each commit, a pass
over every draw at each draw, a glob per member) makes them grow with the search and fails."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from packexp.objectives import ACCURACY, Objective
from packexp.runner import journal as journal_module
from packexp.runner.keep import KeepModels
from packexp.schedulers import Asha, Hyperband
from packexp.space import SearchSpace
from packexp.strategies.base import Capacity
from packexp.strategies.knn import KnnStrategy
from packexp.testing.fake_trainer import FakeTrainer, fake_search

COUNTED = {"score": (Objective, "value"), "grid": (SearchSpace, "grid_index"),
           "identity": (SearchSpace, "identity"), "fits": (Capacity, "fits")}


def counted(monkeypatch: pytest.MonkeyPatch, counts: Counter) -> None:
    """Counts each call of ``COUNTED``'s methods, and the journal's fsyncs."""
    for name, (owner, method) in COUNTED.items():
        monkeypatch.setattr(owner, method, counting(getattr(owner, method), name, counts))
    fsync = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync",
                        lambda fd: counts.update(["fsync"]) or fsync(fd))


def counting(f: Callable, name: str, counts: Counter) -> Callable:
    def wrapper(*args, **kwargs):
        counts[name] += 1
        return f(*args, **kwargs)

    return wrapper


def asha_search(run_dir: Path, n: int, keep: int | str, monkeypatch) -> tuple[Counter, int]:
    counts: Counter = Counter()
    trainer = FakeTrainer(failing="t0003")
    search = fake_search(run_dir, trainer, strategy=KnnStrategy(),
                         keep=KeepModels(keep, ACCURACY))
    trainer.journal = None  # the fake's own record of the journal at each call: not the driver
    counted(monkeypatch, counts)
    search.run(Asha(27, 3, num_configs=n, max_epochs=4 * n))
    monkeypatch.undo()
    return counts, len(search.trials)


@pytest.mark.parametrize("keep", ["best", 5])
def test_asha_s_operations_per_trial_do_not_grow_with_the_trials(tmp_path, monkeypatch, keep):
    small, n_small = asha_search(tmp_path / "small", 150, keep, monkeypatch)
    large, n_large = asha_search(tmp_path / "large", 600, keep, monkeypatch)
    assert (n_small, n_large) == (150, 600)
    for name in ("score", "grid", "identity", "fits", "fsync"):
        assert large[name] / n_large <= 1.5 * max(small[name], 1) / n_small + 1, (
            name, small[name], large[name])
    assert small["score"] > 0 and small["fsync"] > 0  # counted: the check is not of zeros


def test_hyperband_s_operations_per_trial_do_not_grow_with_the_trials(tmp_path, monkeypatch):
    per_trial = []
    for R in (27, 81):
        counts: Counter = Counter()
        trainer = FakeTrainer()
        search = fake_search(tmp_path / str(R), trainer, keep=KeepModels("best", ACCURACY))
        trainer.journal = None
        counted(monkeypatch, counts)
        search.run(Hyperband(R, 3))
        monkeypatch.undo()
        per_trial.append({k: v / len(search.trials) for k, v in counts.items()})
    small, large = per_trial
    for name in ("score", "grid", "fsync"):
        assert large.get(name, 0) <= 1.5 * small.get(name, 0) + 1, (name, small, large)


def test_knn_asks_each_trial_s_cost_once_whatever_the_rung():
    """kNN packs a rung of n trials asking each one's cost once (not once per pack it might
    join), and every trial lands in one pack that fits."""
    import dataclasses

    from packexp.testing.fake_trainer import SPACE

    asked: list[str] = []
    capacity = Capacity(4.0, cost=lambda t: asked.append(t.trial_id) or 1.0)
    for copies in (1, 8):
        asked.clear()
        trials = [dataclasses.replace(t, trial_id=f"t{i}") for i, t in
                  enumerate(SPACE.sample(40, 0, 0) * copies)]
        packs = KnnStrategy().pack(trials, capacity)
        assert sorted(t.trial_id for g in packs for t in g) == sorted(t.trial_id for t in trials)
        assert all(len(g) <= 4 for g in packs) and len(asked) == len(trials)
