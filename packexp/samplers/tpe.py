"""``sampler=tpe``: BOHB's sampling (Falkner et al. 2018) with Optuna's TPESampler as the model.

Each configuration of a bracket is drawn, with probability ``1 - random_fraction``, from a
tree-structured Parzen estimator fitted on the results at the largest budget (epochs) that has
at least ``min_points`` of them; otherwise, and while no budget has enough, at random.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packexp.errors import ConfigError, positive_int
from packexp.samplers import Observation, Sampler
from packexp.space import SearchSpace, Trial, derive_seed
from packexp.space.dimensions import Choice, FloatRange, IntRange
from packexp.space.drawn import drawn_keys

# Separates the sampler's own seeds from the trials' (derive_seed(seed, bracket, i)).
STREAM = 7919


class TpeSampler(Sampler):
    """BOHB's model-based sampling through Optuna's ask-and-tell interface.

    Args:
        random_fraction: BOHB's rho: the share of configurations drawn at random, whatever
            the model says, so the whole space stays explored.
        min_points: Results a budget needs before its model is used; null: the number of
            hyper-parameters plus one, BOHB's N_min.
        fresh_tries: How many times the model is asked for a configuration not drawn before
            (a finite grid's no-repeat rule) before a random one replaces its pick.
    """

    learns = True

    def __init__(self, random_fraction: float = 1 / 3, min_points: int | None = None,
                 fresh_tries: int = 20) -> None:
        if not 0 <= random_fraction <= 1:
            raise ConfigError(f"sampler.random_fraction={random_fraction!r}: must be between "
                              "0 and 1")
        positive_int("sampler.min_points", min_points, 2, optional=True, error=ConfigError)
        positive_int("sampler.fresh_tries", fresh_tries, error=ConfigError)
        self.random_fraction = random_fraction
        self.min_points = min_points
        self.fresh_tries = fresh_tries

    def sample(self, space: SearchSpace, n: int, seed: int, bracket: int,
               history: Sequence[Observation],
               drawn: Sequence[Mapping[str, Any]] = ()) -> list[Trial]:
        # identities, seeds, and the random draws (none drawn before, while there are others)
        trials = space.sample(n, seed, bracket, drawn)
        fitted = self.budget(space, history)
        if not fitted:
            return trials
        coin = np.random.default_rng(derive_seed(seed, bracket, STREAM))
        used = set(drawn_keys(drawn, (id(space), "identity"), space.identity))

        def fresh(hparams: Mapping[str, Any]) -> bool:
            """Not drawn yet, or the grid has nothing else (a float range never repeats)."""
            index = space.identity(hparams)
            return index is None or index not in used or len(used) >= space.size

        picked = []
        for i, trial in enumerate(trials):
            hparams = trial.hparams
            if coin.random() >= self.random_fraction:
                hparams = ask(space, fitted, derive_seed(seed, bracket, STREAM + 1 + i))
                for retry in range(1, self.fresh_tries):  # the model asked again, afresh
                    if fresh(hparams):
                        break
                    hparams = ask(space, fitted, derive_seed(seed, bracket, STREAM + 1 + i,
                                                             retry))
            if not fresh(hparams):  # the first random draw still unused instead
                hparams = next((t.hparams for t in trials if fresh(t.hparams)), hparams)
            used.add(space.identity(hparams))
            used.discard(None)  # a float range's configuration: never repeated
            picked.append(dataclasses.replace(trial, hparams=hparams,
                                              features=space.features(hparams)))
        return picked

    def budget(self, space: SearchSpace, history: Sequence[Observation]) -> list[Observation]:
        """The results at the largest budget with at least ``min_points`` of them; [] if none."""
        needed = self.min_points or len(space.dims) + 1
        by_epochs: dict[float, list[Observation]] = {}
        for o in history:
            by_epochs.setdefault(o.epochs, []).append(o)
        enough = [e for e, seen in by_epochs.items() if len(seen) >= needed]
        return by_epochs[max(enough)] if enough else []


def ask(space: SearchSpace, observed: Sequence[Observation], seed: int) -> dict[str, Any]:
    """One configuration from a TPE fitted on ``observed`` (a higher score is better)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spaces = {name: distribution(dim) for name, dim in space.dims.items()}
    conditional = bool(space.conditions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # group: Optuna's conditional support, one model per set of parameters seen together
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, multivariate=True,
                                             group=conditional)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.add_trials([optuna.trial.create_trial(
        params=dict(o.hparams), distributions={k: spaces[k] for k in o.hparams if k in spaces},
        value=o.score) for o in observed])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if not conditional:
            params = study.ask(spaces).params
            return {name: plain(params[name]) for name in space.dims}
        # Define by run, parents first: an inactive hyper-parameter is never asked for.
        trial, values = study.ask(), {}
        for name in space.order:
            if space.active(name, values):
                values[name] = plain(suggest(trial, name, space.dims[name]))
    return {name: values[name] for name in space.dims if name in values}


def suggest(trial: Any, name: str, dim: Any) -> Any:
    """``trial``'s value of ``name``, asked as ``distribution(dim)`` describes it."""
    if isinstance(dim, Choice):
        return trial.suggest_categorical(name, list(dim.values))
    if isinstance(dim, IntRange):
        return trial.suggest_int(name, dim.low, dim.high, step=dim.step)
    return trial.suggest_float(name, dim.low, dim.high, log=dim.log)


def distribution(dim: Any) -> Any:
    """The Optuna distribution of a search-space dimension."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if isinstance(dim, Choice):
        return CategoricalDistribution(dim.values)
    if isinstance(dim, IntRange):
        return IntDistribution(dim.low, dim.high, step=dim.step)
    if isinstance(dim, FloatRange):
        return FloatDistribution(dim.low, dim.high, log=dim.log)
    raise TypeError(f"{dim.where}: no Optuna distribution for kind={dim.kind}")


def plain(value: Any) -> Any:
    """A NumPy scalar as the plain Python value the space's own draws give."""
    return value.item() if isinstance(value, np.generic) else value
