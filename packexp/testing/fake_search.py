"""A fake of the search a population scheduler drives (``Pbt.drive``): members score by their
learning rate, and it keeps what it was told, so a test reads the scheduler's decisions."""

from __future__ import annotations

from packexp.events import Exploit
from packexp.search_space import SearchSpace, Trial

SPACE = SearchSpace({
    "batch_size": {"kind": "int", "low": 20, "high": 70, "step": 5},
    "optimizer": ["adam", "sgd", "adagrad", "momentum"],
    "learning_rate": {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "activation": ["sigmoid", "leaky_relu", "tanh", "relu"],
    "width": [16, 32, 64],
}, categorical=["optimizer", "activation"])
DONOR = {"batch_size": 45, "optimizer": "sgd", "learning_rate": 0.01, "activation": "tanh",
         "width": 32}



class FakeSearch:
    """A search whose members score by their learning rate; it keeps what it was told."""

    seed = 7
    space = SPACE

    def __init__(self, journaled=None):
        self.journaled = journaled or {}
        self.trained: list[tuple[int, dict]] = []
        self.exploited: list[tuple[int, list[Exploit], bool]] = []

    def sample(self, bracket):
        return [Trial(f"m{i}", {**DONOR, "learning_rate": 0.001 * (i + 1)}, (), seed=i)
                for i in range(bracket.rungs[0].n)]

    def train_rung(self, bracket, rung, members, epochs):
        self.trained.append((rung, {t.trial_id: dict(t.hparams) for t in members}))
        return {t.trial_id: t.hparams["learning_rate"] for t in members}

    def fits(self, donor, values):
        return True

    def replayed_exploits(self):
        return self.journaled

    def exploit(self, bracket, rung, members, exploits, journaled=False):
        self.exploited.append((rung, exploits, journaled))
        new = {e.member: e.hparams for e in exploits}
        return [Trial(t.trial_id, new.get(t.trial_id, t.hparams), ()) for t in members]
