"""Search spaces of value lists and ranges, and the trials sampled from them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packexp.errors import ConfigError
from packexp.space.conditions import condition_of, in_order
from packexp.space.dimensions import Choice, Dimension, dimension
from packexp.space.drawn import drawn_keys
from packexp.space.options import RUNTIME_HPARAMS, activation_of, lr_schedule_of, rule_for


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

    # The values the trainer reads, typed in one place, with the defaults of those a space
    # may leave out (``space.options``); a model's own values stay in ``hparams``.

    @property
    def batch_size(self) -> int:
        return int(self.hparams["batch_size"])

    @property
    def optimizer(self) -> str | None:
        return self.hparams.get("optimizer")

    @property
    def learning_rate(self) -> float:
        return float(self.hparams["learning_rate"])

    @property
    def activation(self) -> str:
        return activation_of(self.hparams)

    @property
    def lr_schedule(self) -> str:
        return lr_schedule_of(self.hparams)


def derive_seed(*entropy: int) -> int:
    """A 32-bit seed derived from the given integers (root seed first)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


# Grid sampling draws flat indices as NumPy int64s; a larger discrete space is sampled like
# one with a float range.
GRID_LIMIT = 2**63 - 1


class SearchSpace:
    """Hyper-parameters, each a value list (a choice), an int range or a float range.

    ``params`` maps each name to a plain list (a choice, as in the paper's Table 3) or to a
    mapping with ``kind``: ``{kind: choice, values: [...]}``, ``{kind: int, low, high, step}``
    or ``{kind: float, low, high, log}`` (see ``Choice``, ``IntRange``, ``FloatRange``).

    The kNN distance between two configurations is the L1 distance of their ``features``,
    a sum over the hyper-parameters of:

    - a numeric choice: the gap between the values' indices in the list;
    - a categorical choice (named in ``categorical``): 0 if equal, 1 if not;
    - a range, int or float: the gap normalised to the range, ``|x - y| / (high - low)``,
      taken in log space with ``log: true``; a range adds at most 1.

    A mapping may add ``when: {parent: [values]}``: the hyper-parameter is active only where
    each named parent (a choice) takes one of its values, and absent from a trial otherwise,
    never defaulted (``momentum: {kind: float, low: 0.5, high: 0.99, when: {optimizer:
    [momentum]}}``). Parents may be conditional themselves, in any order, but not in a cycle.
    A conditional space is sampled without repeats over its distinct configurations (each
    with its inactive hyper-parameters left out); in the kNN distance a conditional
    hyper-parameter adds 1 where one trial has it and the other not.

    Attributes:
        dims: Each hyper-parameter's ``Dimension``, in config order.
        params: The value list of each finite dimension (a float range has none): a tuple
            for a choice, a ``range`` for an int range.
        categorical: Names of the choices measured by equality.
        conditions: Each conditional hyper-parameter's parents and their values.
    """

    def __init__(self, params: Mapping[str, Any], categorical: Sequence[str] = ()) -> None:
        if not params:
            raise ConfigError("search_space.params: is empty; give at least one value list")
        self.conditions: dict[str, dict[str, tuple[Any, ...]]] = {}
        specs = {}
        for name, spec in params.items():
            if isinstance(spec, Mapping) and "when" in spec:
                spec = dict(spec)
                self.conditions[name] = spec.pop("when")
            specs[name] = spec
        self.dims: dict[str, Dimension] = {
            name: dimension(name, spec, name in categorical) for name, spec in specs.items()}
        self.conditions = {name: condition_of(name, when, self.dims)
                           for name, when in self.conditions.items()}
        self.order = in_order(self.conditions, list(self.dims))
        unknown = set(categorical) - set(self.dims)
        if unknown:
            raise ConfigError(
                f"search_space.categorical: {sorted(unknown)} are not hyper-parameters"
            )
        for name in categorical:
            if not isinstance(self.dims[name], Choice):
                raise ConfigError(f"search_space.categorical: {name} is a kind="
                                  f"{self.dims[name].kind} range; only value lists are "
                                  "categorical")
        self.categorical = frozenset(categorical)
        self.params: dict[str, Sequence[Any]] = {
            name: dim.values for name, dim in self.dims.items() if dim.values is not None}

    @property
    def size(self) -> int | float:
        """How many configurations the space holds; ``math.inf`` with a float range."""
        if self.conditions and self._listed() is not None:
            return len(self._listed())
        return math.prod(dim.size for dim in self.dims.values())

    def active(self, name: str, values: Mapping[str, Any]) -> bool:
        """Whether ``name`` is part of a configuration with ``values``: it has no condition,
        or each parent it names is present with one of its values."""
        return all(parent in values and values[parent] in allowed
                   for parent, allowed in self.conditions.get(name, {}).items())

    def project(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` without the hyper-parameters their conditions leave out, in config
        order (a parent decides before its children, whatever their order)."""
        kept: dict[str, Any] = {}
        for name in self.order:
            if name in values and self.active(name, kept):
                kept[name] = values[name]
        return {name: kept[name] for name in self.dims if name in kept}

    def _listed(self) -> list[dict[str, Any]] | None:
        """A conditional space's distinct configurations in grid order, where its grid is at
        most ``LIST_LIMIT`` (None beyond, or with a float range)."""
        if "_configs" not in self.__dict__:
            grid = math.prod(dim.size for dim in self.dims.values())
            configs = None
            if grid <= LIST_LIMIT:
                seen: dict[tuple, dict[str, Any]] = {}
                names = list(self.dims)
                for combo in itertools.product(*(self.dims[n].values for n in names)):
                    config = self.project(dict(zip(names, combo, strict=True)))
                    seen.setdefault(tuple(config.items()), config)
                configs = list(seen.values())
            self.__dict__["_configs"] = configs
        return self.__dict__["_configs"]

    @property
    def structures(self) -> int | float:
        """How many member structures (``member_key``) the space holds; ``math.inf`` when a
        hyper-parameter that shapes the model or optimizer is a float range."""
        return self.count_structures()

    def count_structures(self, model: Sequence[str] = ()) -> int | float:
        """``structures`` for a model whose builder takes ``model`` at run time. The optimizer
        counts only when one of its values trains through a Keras class (no rule)."""
        runtime = set(RUNTIME_HPARAMS) | set(model)
        optimizers = self.dims.get("optimizer")
        if optimizers is not None and optimizers.values is not None and all(
                rule_for({"optimizer": o}) for o in optimizers.values):
            runtime.add("optimizer")
        return math.prod(dim.size for name, dim in self.dims.items() if name not in runtime)

    @property
    def first(self) -> dict[str, Any]:
        """The first configuration: each choice's first value, each range's ``low`` (the
        hyper-parameters the first values leave active)."""
        return self.project({name: dim.first for name, dim in self.dims.items()})

    def features(self, hparams: Mapping[str, Any]) -> tuple[float, ...]:
        """Embeds a configuration so that L1 distance is the kNN distance (class docstring).
        A conditional hyper-parameter adds a presence coordinate and, where absent, sits at
        its first value."""
        out: list[float] = []
        for name, dim in self.dims.items():
            if name in self.conditions:
                out.append(float(name in hparams))
                out += dim.coordinate(hparams.get(name, dim.first))
            else:
                out += dim.coordinate(hparams[name])
        return tuple(out)

    def distance(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        return float(np.abs(np.subtract(self.features(a), self.features(b))).sum())

    def sample(self, n: int, seed: int, bracket: int,
               drawn: Iterable[Mapping[str, Any]] = ()) -> list[Trial]:
        """Samples ``n`` configurations, reproducibly under ``seed``, ``bracket`` and ``drawn``.

        A discrete space (choices and int ranges) is sampled without replacement from its
        grid, ``n`` capped at its size, and from the configurations not in ``drawn`` (those
        an earlier bracket or plan of the search drew) while there are enough; once they run
        out, the rest come from ``drawn`` ones, still without a repeat within the call. A
        space with a float range draws each hyper-parameter of each trial independently, in
        config order, from the same generator (a repeat there has probability zero).

        Args:
            n: How many.
            seed: Root seed of the run.
            bracket: Bracket index; part of each trial's identity and seed.
            drawn: Configurations the search has drawn already, in any order.

        Returns:
            Trials ``b{bracket}-t{i}``, each seeded from the root seed and its identity, their
            values plain Python (ints for int ranges, floats for float ranges).
        """
        rng = np.random.default_rng(derive_seed(seed, bracket, 0))
        dims = list(self.dims.values())
        if self.conditions:
            configs = self._sample_conditional(rng, n, drawn)
        elif self.size <= GRID_LIMIT:
            used = sorted(drawn_keys(drawn, (id(self), "grid"), self.grid_index))
            picks = (rng.choice(self.size, size=min(n, self.size), replace=False) if not used
                     else _unused_first(rng, int(self.size), used, n))
            sizes = [dim.size for dim in dims]
            configs = [[dim.value(int(j)) for dim, j in
                        zip(dims, np.unravel_index(int(flat), sizes), strict=True)]
                       for flat in picks]
        else:
            configs = [[dim.sample(rng) for dim in dims] for _ in range(n)]
        trials = []
        for i, config in enumerate(configs):
            hparams = config if self.conditions else dict(zip(self.dims, config, strict=True))
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

    def _sample_conditional(self, rng: np.random.Generator, n: int,
                            drawn: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A conditional space's draw: without repeats over its listed configurations (those
        not ``drawn`` first), or, where it lists none, each hyper-parameter drawn in turn,
        parents first, those left inactive skipped."""
        listed = self._listed()
        if listed is None:
            seen = set(drawn_keys(drawn, (id(self), "identity"), self.identity))
            configs = []
            for _ in range(n):
                for _attempt in range(REDRAWS):  # a repeat drawn again, while it may differ
                    config: dict[str, Any] = {}
                    for name in self.order:
                        if self.active(name, config):
                            config[name] = self.dims[name].sample(rng)
                    config = {k: config[k] for k in self.dims if k in config}
                    if self.identity(config) not in seen:
                        break
                seen.add(self.identity(config))
                configs.append(config)
            return configs
        used = sorted(drawn_keys(drawn, (id(self), "grid"), self.grid_index))
        picks = (rng.choice(len(listed), size=min(n, len(listed)), replace=False) if not used
                 else _unused_first(rng, len(listed), used, n))
        return [dict(listed[int(i)]) for i in picks]

    def identity(self, hparams: Mapping[str, Any]) -> Any:
        """What tells two configurations apart for the no-repeat rule: the grid index (None
        with a float range: its draws never repeat); a conditional space's, its active values
        (a configuration whose float ranges are all inactive can repeat)."""
        if self.conditions and self._listed() is None:
            return tuple(self.project(hparams).items())
        return self.grid_index(hparams)

    def grid_index(self, hparams: Mapping[str, Any]) -> int | None:
        """The configuration's place in the grid (``sample``'s flat index); None if one of
        its values is not in the space (a journal of another space)."""
        if self.conditions:
            listed = self._listed()
            if listed is None:
                return None
            key = tuple(self.project(hparams).items())
            if "_index" not in self.__dict__:
                self.__dict__["_index"] = {tuple(c.items()): i for i, c in enumerate(listed)}
            return self.__dict__["_index"].get(key)
        index = 0
        for name, dim in self.dims.items():
            try:
                index = index * len(dim.values) + dim.values.index(hparams[name])
            except (KeyError, ValueError, TypeError):
                return None
        return index

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every configuration of a finite space, in grid order."""
        infinite = [name for name, dim in self.dims.items() if dim.values is None]
        if infinite:
            raise TypeError(f"search_space.params.{infinite[0]}: a float range has endless "
                            "configurations; sample the space instead")
        if self.conditions:
            yield from (dict(c) for c in self._listed() or ())
            return
        names = list(self.params)
        for combo in itertools.product(*self.params.values()):
            yield dict(zip(names, combo, strict=True))


#: The largest grid (every hyper-parameter's values multiplied) a conditional space lists
#: its distinct configurations from, to draw them without repeats.
LIST_LIMIT = 1_000_000
#: Draws of a conditional space that lists none, before a repeat is kept.
REDRAWS = 100


def _unused_first(rng: np.random.Generator, size: int, used: list[int], n: int) -> list[int]:
    """``min(n, size)`` distinct grid indices: the unused ones (not in the sorted ``used``)
    while they last, then used ones. Works by rank, so a huge grid is never listed."""
    free = size - len(used)
    ranks = rng.choice(free, size=min(n, free), replace=False)
    picks = []
    for rank in map(int, ranks):  # the rank-th unused index
        index = rank
        for u in used:
            if u > index:
                break
            index += 1
        picks.append(index)
    if len(picks) < n and used:
        again = rng.choice(len(used), size=min(n - len(picks), len(used)), replace=False)
        picks += [used[int(j)] for j in again]
    return picks
