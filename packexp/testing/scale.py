"""A search of thousands of trials on the fake trainer, in this process or as its own
(``python -m packexp.testing.scale RUN_DIR N``), for the checks and benchmark of resume at
scale: ASHA over the paper's Table 3 space, packed by kNN, its best model kept; a second run
in the same directory resumes the first. No TensorFlow, no Hydra.

Run as a process it prints one JSON line: each trial's outcome (``fake_trainer.outcome``), the
best, how many results the resume read back and the seconds from the start until its first
pack was sent (``replay_s``: the journal read, checked and told to the policy again).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from packexp.events import Listener, Listeners, PackStarted
from packexp.executors import LocalExecutor
from packexp.objectives import ACCURACY
from packexp.runner import PackedSearch, SearchSettings, Study
from packexp.runner.journal import Journal
from packexp.runner.keep import KeepModels
from packexp.schedulers import Asha
from packexp.space import SearchSpace
from packexp.strategies import Capacity
from packexp.strategies.knn import KnnStrategy
from packexp.testing.fake_trainer import TRAIN_SIZE, FakeCache, FakeTrainer, outcome

#: Table 3 of the paper: 11 x 4 x 6 x 4 = 1,056 configurations, so thousands of trials repeat.
TABLE3 = SearchSpace({"batch_size": list(range(20, 71, 5)),
                      "optimizer": ["adam", "sgd", "adagrad", "momentum"],
                      "learning_rate": [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1],
                      "activation": ["sigmoid", "leaky_relu", "tanh", "relu"]},
                     categorical=["optimizer", "activation"])


class FirstPack(Listener):
    """Notes when the first pack is sent (``time.perf_counter()``)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def on_pack_started(self, event: PackStarted) -> None:
        if self.at is None:
            self.at = time.perf_counter()


def drawn(run_dir: Path, trial_id: str) -> bool:
    """Whether the journal in ``run_dir`` names ``trial_id`` in its last lines (a plan drew
    it): read from its tail, so polling a journal of thousands of records stays cheap."""
    journal = Journal(run_dir).path
    if not journal.exists():
        return False
    with journal.open("rb") as f:
        f.seek(max(0, journal.stat().st_size - 200_000))
        return f'"{trial_id}"'.encode() in f.read()


def asha_search(run_dir: Path, n: int, trainer: FakeTrainer | None = None,
                listeners: tuple[Listener, ...] = ()) -> tuple[PackedSearch, Asha]:
    """ASHA over ``n`` configurations (``4 n`` epochs, R = 27) in ``run_dir``, on the fake
    trainer in packs of up to 8: resumed where ``run_dir`` holds a journal."""
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir)
    study = Study.open(run_dir, ACCURACY, resume=journal.exists)
    trainer = trainer or FakeTrainer(failing="t0003")
    search = PackedSearch(
        space=TABLE3, strategy=KnnStrategy(), capacity=Capacity.members(8),
        executor=LocalExecutor(trainer=trainer).start(FakeCache()), study=study,
        listeners=Listeners(list(listeners)),
        settings=SearchSettings(seed=0, tags={"strategy": "knn"}, train_size=TRAIN_SIZE,
                                keep=KeepModels("best", ACCURACY)))
    return search, Asha(27, 3, num_configs=n, max_epochs=4 * n)


def main(run_dir: str, n: str) -> dict[str, Any]:
    started = time.perf_counter()
    first = FirstPack()
    search, policy = asha_search(Path(run_dir), int(n), listeners=(first,))
    search.run(policy)
    search.finish()
    best = search.best()
    return {"outcome": outcome(search), "best": best.to_dict() if best else None,
            "resumed": search.replayed.members,
            "replay_s": None if first.at is None else round(first.at - started, 3),
            "seconds": round(time.perf_counter() - started, 3)}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
