"""Search spaces of ordered value lists, and the trials sampled from them."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packexp.errors import ConfigError


@dataclass(frozen=True)
class Trial:
    """One sampled configuration.

    Attributes:
        trial_id: Stable identity, independent of any pack.
        hparams: Hyper-parameter name to value.
        features: Embedding whose L1 distance is the paper's kNN distance.
        seed: Seed of the trial's initial weights and data order.
        bracket: Hyperband bracket the trial was sampled for.
    """

    trial_id: str
    hparams: Mapping[str, Any]
    features: tuple[float, ...] = field(repr=False)
    seed: int = 0
    bracket: int = 0


# Hyper-parameters that are values of a member's variables or of the step's inputs: they
# never change what the pack engine builds or traces. (Sliced batches are cut at traced
# sizes, so under data_sharing=slice the batch size is structure too.)
RUNTIME_HPARAMS = ("batch_size", "learning_rate")


def member_key(trial: Trial, sliced: bool = False) -> tuple:
    """A trial's member structure: every hyper-parameter that shapes its model or optimizer."""
    runtime = RUNTIME_HPARAMS[1:] if sliced else RUNTIME_HPARAMS
    return tuple(sorted((k, repr(v)) for k, v in trial.hparams.items() if k not in runtime))


def pack_key(trials: Sequence[Trial], sliced: bool = False, fusion: str | None = None) -> tuple:
    """A pack's structure: its members' structures in a canonical order, whether their batch
    sizes differ (a fused pack masks padded rows only then) and its fusion setting. Packs of
    one structure run on the same built models and traced step functions."""
    keys = sorted(member_key(t, sliced) for t in trials)
    mixed = len({int(t.hparams["batch_size"]) for t in trials}) > 1
    return (*keys, mixed, fusion)


def derive_seed(*entropy: int) -> int:
    """A 32-bit seed derived from the given integers (root seed first)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


class SearchSpace:
    """Ordered value lists, one per hyper-parameter.

    Numeric hyper-parameters are measured by the gap between their indices in the list;
    categorical ones (listed in ``categorical``) by equality, as in the paper's kNN distance.
    """

    def __init__(
        self, params: Mapping[str, Sequence[Any]], categorical: Sequence[str] = ()
    ) -> None:
        if not params:
            raise ConfigError("search_space.params: is empty; give at least one value list")
        self.params: dict[str, tuple[Any, ...]] = {}
        for name, values in params.items():
            if isinstance(values, str) or not isinstance(values, Sequence) or not values:
                raise ConfigError(
                    f"search_space.params.{name}={values!r}: needs a non-empty list of values"
                )
            if len(set(map(repr, values))) != len(values):
                raise ConfigError(f"search_space.params.{name}={list(values)}: repeats a value")
            self.params[name] = tuple(values)
        unknown = set(categorical) - set(self.params)
        if unknown:
            raise ConfigError(
                f"search_space.categorical: {sorted(unknown)} are not hyper-parameters"
            )
        self.categorical = frozenset(categorical)

    @property
    def structures(self) -> int:
        """How many member structures (``member_key``) the space holds."""
        return int(np.prod([len(v) for k, v in self.params.items()
                            if k not in RUNTIME_HPARAMS]))

    @property
    def size(self) -> int:
        return int(np.prod([len(v) for v in self.params.values()]))

    def features(self, hparams: Mapping[str, Any]) -> tuple[float, ...]:
        """Embeds a configuration so that L1 distance is the paper's distance.

        A numeric value maps to its index. A categorical one maps to a one-hot vector scaled
        by 1/2, so two different categories are at distance exactly 1.
        """
        out: list[float] = []
        for name, values in self.params.items():
            index = values.index(hparams[name])
            if name in self.categorical:
                out.extend(0.5 if i == index else 0.0 for i in range(len(values)))
            else:
                out.append(float(index))
        return tuple(out)

    def distance(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        return float(np.abs(np.subtract(self.features(a), self.features(b))).sum())

    def sample(self, n: int, seed: int, bracket: int) -> list[Trial]:
        """Samples ``n`` configurations without replacement.

        Args:
            n: How many; capped at the size of the space.
            seed: Root seed of the run.
            bracket: Bracket index; part of each trial's identity and seed.

        Returns:
            Trials ``b{bracket}-t{i}``, each seeded from the root seed and its identity.
        """
        rng = np.random.default_rng(derive_seed(seed, bracket, 0))
        picks = rng.choice(self.size, size=min(n, self.size), replace=False)
        grid = list(self.params.values())
        trials = []
        for i, flat in enumerate(picks):
            combo = np.unravel_index(int(flat), [len(v) for v in grid])
            hparams = {
                name: _plain(values[j])
                for (name, values), j in zip(self.params.items(), combo, strict=True)
            }
            trials.append(
                Trial(
                    trial_id=f"b{bracket}-t{i:03d}",
                    hparams=hparams,
                    features=self.features(hparams),
                    seed=derive_seed(seed, bracket, i + 1),
                    bracket=bracket,
                )
            )
        return trials

    def __iter__(self):
        names = list(self.params)
        for combo in itertools.product(*self.params.values()):
            yield dict(zip(names, combo, strict=True))


def _plain(value: Any) -> Any:
    """Turns NumPy scalars into Python ones so results serialise to JSON."""
    return value.item() if isinstance(value, np.generic) else value
