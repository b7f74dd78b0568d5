"""A scheduler's decisions without a search: ``simulate`` drives a policy as the runner does,
with training that takes no time and a score function in its place. Pure Python; for tests of
a policy in milliseconds.

``SPACE`` and ``DONOR`` are a population's space and a member's values, as the tests of
``scheduler=pbt`` use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from packexp.objectives import ACCURACY, Objective
from packexp.records.record import RungResult
from packexp.schedulers import Exploits, Plan, Planned, Retire, Scheduler
from packexp.schedulers.base import continued
from packexp.space import SearchSpace, Trial

SPACE = SearchSpace({
    "batch_size": {"kind": "int", "low": 20, "high": 70, "step": 5},
    "optimizer": ["adam", "sgd", "adagrad", "momentum"],
    "learning_rate": {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "activation": ["sigmoid", "leaky_relu", "tanh", "relu"],
    "width": [16, 32, 64],
}, categorical=["optimizer", "activation"])
DONOR = {"batch_size": 45, "optimizer": "sgd", "learning_rate": 0.01, "activation": "tanh",
         "width": 32}

Made = Planned | Exploits | Retire


def simulate(policy: Scheduler, space: SearchSpace,
             score: Callable[[Trial, float], float | Mapping[str, float] | None], seed: int = 0,
             draw: Callable[[int, int], list[Trial]] | None = None,
             fits: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] = lambda a, b: True,
             max_members: int = 8, objective: Objective = ACCURACY) -> list[Made]:
    """Runs ``policy`` to its end: each plan's trials are scored at once, by ``score(trial,
    epochs)`` (the value of ``objective``'s metric, or a dict of every metric's under
    several; None: the member diverged and ends ``failed``), in plan order. Returns what
    was made, in order: plans, exploits, retirements.

    Every plan trains at once and nothing waits (``decide(0)``): for a synchronous policy
    (Hyperband, PBT) the decisions the runner carries out; for ASHA, those of a runner whose
    packs all train in no time. Configurations are drawn as the runner draws them with the
    random sampler
    (``runner.draws.Draws``): a synchronous plan's, its bracket's first rung, none drawn by
    an earlier bracket again; a keyed plan's, seeded by the plan's number, none drawn by an
    earlier keyed plan again, renamed ``t<i>`` on from those drawn before.

    Args:
        draw: ``(n, salt) -> n new configurations`` in place of the space's own.
    """
    policy.start(SimpleNamespace(seed=seed, space=space, max_members=max_members, fits=fits,
                                 objective=objective))
    brackets = {b.s: b for b in policy.brackets()}
    drawn_values: list[dict[str, Any]] = []

    def sample(n: int, salt: int) -> list[Trial]:
        new = draw(n, salt) if draw else space.sample(n, seed, salt, drawn_values)
        drawn_values.extend(dict(t.hparams) for t in new)
        return new

    current: dict[str, Trial] = {}
    members: dict[tuple[int, int], list[str]] = {}
    made: list[Made] = []
    retired: set[str] = set()
    keyed = drawn = 0

    def carry_out(decisions: list) -> bool:
        nonlocal keyed, drawn
        for d in decisions:
            if isinstance(d, Retire) and d.trial_id in retired:
                continue  # the runner ends a trial once
            made.append(d)
            if isinstance(d, Retire):
                retired.add(d.trial_id)
            elif isinstance(d, Exploits):
                after = continued([current[i] for i in members[(d.bracket, d.rung)]],
                                       d.exploits, space)
                current.update((t.trial_id, t) for t in after)
                retired.difference_update(e.member for e in d.exploits)  # a diverged one trains on
                policy.on_exploits(d)
            elif isinstance(d, Plan):
                n = brackets[d.bracket].rungs[0].n if d.key is None else d.draw
                new = sample(n, d.bracket if d.key is None else keyed) if d.draw else []
                if d.key is not None:
                    new = [dataclasses.replace(t, trial_id=f"t{drawn + i:04d}", bracket=0)
                           for i, t in enumerate(new)]
                    keyed, drawn = keyed + 1, drawn + len(new)
                current.update((t.trial_id, t) for t in new)
                trials = [current[i] for i in d.trial_ids] + new
                members[(d.bracket, d.rung)] = [t.trial_id for t in trials]
                made[-1] = planned = Planned(d.bracket, d.rung, tuple(trials), len(new), d.key)
                carry_out(policy.on_plan(planned))
                epochs = brackets[d.bracket].rungs[d.rung].r
                for t in trials:
                    value = score(t, epochs)  # None: the member diverged, and ends failed
                    if value is None:
                        carry_out([Retire(t.trial_id, "failed")])
                    metrics = {"val_accuracy": None, "val_loss": None, "train_loss": None,
                               **(value if isinstance(value, Mapping)
                                  else {objective.metric: value})}
                    carry_out(policy.on_result(RungResult(
                        t.trial_id, d.bracket, d.rung, epochs, 0, **metrics,
                        pack_id=f"{d.key or f'b{d.bracket}-r{d.rung}'}-p00", checkpoint=None,
                        failed=value is None)))
        return any(not isinstance(d, Retire) for d in decisions)

    while carry_out(policy.decide(0)):
        pass
    return made
