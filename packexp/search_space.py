"""Search spaces of value lists and ranges, and the trials sampled from them."""

from __future__ import annotations

import abc
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from packexp.errors import ConfigError
from packexp.pack_options import RUNTIME_HPARAMS, activation_of, lr_schedule_of, rule_for


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
    # may leave out (``pack_options``); a model's own values stay in ``hparams``.

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


class Dimension(abc.ABC):
    """One hyper-parameter: its values, how one is drawn, and its place in the embedding."""

    kind: ClassVar[str]
    name: str
    values: Sequence[Any] | None  # every value, in order; None for a continuum

    @property
    def size(self) -> int | float:
        return math.inf if self.values is None else len(self.values)

    @property
    @abc.abstractmethod
    def first(self) -> Any:
        """The first value: a choice's first, a range's ``low``."""

    @abc.abstractmethod
    def value(self, index: int) -> Any:
        """The value at ``index`` of ``values``, as a plain Python value."""

    @abc.abstractmethod
    def sample(self, rng: np.random.Generator) -> Any:
        """One value drawn from ``rng``, as a plain Python value."""

    @abc.abstractmethod
    def coordinate(self, value: Any) -> tuple[float, ...]:
        """The value's place in the embedding whose L1 distance is the kNN distance."""

    @property
    def where(self) -> str:
        return f"search_space.params.{self.name}"


@dataclass(frozen=True)
class Choice(Dimension):
    """A value list, in order: ``[a, b, c]`` or ``{kind: choice, values: [a, b, c]}``.

    A numeric choice's coordinate is the value's index in the list; a categorical one's is a
    one-hot vector scaled by 1/2, so two different values are at distance 1.
    """

    kind: ClassVar[str] = "choice"
    name: str
    values: tuple[Any, ...]
    categorical: bool = False

    def __post_init__(self) -> None:
        values = self.values
        if isinstance(values, str | Mapping) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{self.where}={values!r}: needs a non-empty list of values")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{self.where}={list(values)}: repeats a value")
        object.__setattr__(self, "values", tuple(values))

    @property
    def first(self) -> Any:
        return self.value(0)

    def value(self, index: int) -> Any:
        return _plain(self.values[index])

    def sample(self, rng: np.random.Generator) -> Any:
        return self.value(int(rng.integers(len(self.values))))

    def coordinate(self, value: Any) -> tuple[float, ...]:
        index = self.values.index(value)
        if self.categorical:
            return tuple(0.5 if i == index else 0.0 for i in range(len(self.values)))
        return (float(index),)


@dataclass(frozen=True)
class IntRange(Dimension):
    """The integers ``low, low + step, ..., high``: ``{kind: int, low, high, step}``.

    ``step`` defaults to 1, and ``high - low`` must be a multiple of it, so that ``high`` is a
    value. The coordinate is normalised like a float range's, ``(x - low) / (high - low)``
    (0 when ``low == high``): the whole range spans distance 1, whatever its step.
    """

    kind: ClassVar[str] = "int"
    name: str
    low: int
    high: int
    step: int = 1

    def __post_init__(self) -> None:
        for key in ("low", "high", "step"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{self.where}: {key}={value!r} is not an integer")
        if self.step < 1:
            raise ConfigError(f"{self.where}: step={self.step} must be an integer >= 1")
        if self.low > self.high:
            raise ConfigError(f"{self.where}: low={self.low} > high={self.high}")
        if (self.high - self.low) % self.step:
            last = self.high - (self.high - self.low) % self.step
            raise ConfigError(f"{self.where}: high={self.high} is not low={self.low} plus a "
                              f"multiple of step={self.step}; the last value would be {last}, "
                              f"so write high={last}")

    @property
    def values(self) -> range:
        return range(self.low, self.high + 1, self.step)

    @property
    def first(self) -> int:
        return self.low

    def value(self, index: int) -> int:
        return self.low + index * self.step

    def sample(self, rng: np.random.Generator) -> int:
        return self.value(int(rng.integers(len(self.values))))

    def coordinate(self, value: Any) -> tuple[float, ...]:
        span = self.high - self.low
        return ((value - self.low) / span if span else 0.0,)


@dataclass(frozen=True)
class FloatRange(Dimension):
    """Real numbers from ``low`` to ``high``: ``{kind: float, low, high, log}``.

    Drawn uniformly, or uniformly in log space with ``log: true`` (then ``low > 0``). The
    coordinate is the value's place in the space it is drawn from: ``(x - low) / (high -
    low)``, or ``(log x - log low) / (log high - log low)``; the range spans distance 1.
    """

    kind: ClassVar[str] = "float"
    name: str
    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        for key in ("low", "high"):
            object.__setattr__(self, key, self._bound(key, getattr(self, key)))
        if not isinstance(self.log, bool):
            raise ConfigError(f"{self.where}: log={self.log!r} must be true or false")
        if self.low > self.high:
            raise ConfigError(f"{self.where}: low={self.low} > high={self.high}")
        if self.low == self.high:
            raise ConfigError(f"{self.where}: low=high={self.low}; a float range needs low < "
                              f"high (a fixed value is a one-value list, [{self.low}])")
        if self.log and self.low <= 0:
            raise ConfigError(f"{self.where}: log=true needs low > 0, not low={self.low}")

    def _bound(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.where}: {key}={value!r} is not a number")
        if not math.isfinite(value):
            raise ConfigError(f"{self.where}: {key}={value!r} must be finite")
        return float(value)

    @property
    def values(self) -> None:
        return None

    @property
    def first(self) -> float:
        return self.low

    def value(self, index: int) -> float:
        raise TypeError(f"{self.where}: a float range has no values to index")

    def sample(self, rng: np.random.Generator) -> float:
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return float(min(max(x, self.low), self.high))  # exp's rounding may step outside

    def coordinate(self, value: Any) -> tuple[float, ...]:
        if self.log:
            return ((math.log(value) - math.log(self.low))
                    / (math.log(self.high) - math.log(self.low)),)
        return ((value - self.low) / (self.high - self.low),)


KINDS: dict[str, type[Dimension]] = {"choice": Choice, "int": IntRange, "float": FloatRange}


def dimension(name: str, spec: Any, categorical: bool = False) -> Dimension:
    """A dimension from its config: a list is a choice; a mapping names its ``kind``.

    Raises:
        ConfigError: One line naming ``search_space.params.<name>`` and what is wrong.
    """
    if not isinstance(spec, Mapping):
        return Choice(name, spec, categorical)
    where = f"search_space.params.{name}"
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind={kind!r} is not one of {', '.join(KINDS)}")
    cls = KINDS[kind]
    keys = [f.name for f in fields(cls) if f.name not in ("name", "categorical")]
    unknown = sorted(set(spec) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]!r} is not a key of kind={kind} (it takes "
                          f"{', '.join(keys)})")
    missing = [f.name for f in fields(cls) if f.name in keys and f.default is MISSING
               and f.name not in spec]
    if missing:
        raise ConfigError(f"{where}: kind={kind} needs {' and '.join(missing)}")
    if cls is Choice:
        return Choice(name, spec["values"], categorical)
    return cls(name, **spec)


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

    Attributes:
        dims: Each hyper-parameter's ``Dimension``, in config order.
        params: The value list of each finite dimension (a float range has none): a tuple
            for a choice, a ``range`` for an int range.
        categorical: Names of the choices measured by equality.
    """

    def __init__(self, params: Mapping[str, Any], categorical: Sequence[str] = ()) -> None:
        if not params:
            raise ConfigError("search_space.params: is empty; give at least one value list")
        self.dims: dict[str, Dimension] = {
            name: dimension(name, spec, name in categorical) for name, spec in params.items()}
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
        return math.prod(dim.size for dim in self.dims.values())

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
        """The first configuration: each choice's first value, each range's ``low``."""
        return {name: dim.first for name, dim in self.dims.items()}

    def features(self, hparams: Mapping[str, Any]) -> tuple[float, ...]:
        """Embeds a configuration so that L1 distance is the kNN distance (class docstring)."""
        return tuple(x for name, dim in self.dims.items()
                     for x in dim.coordinate(hparams[name]))

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
        if self.size <= GRID_LIMIT:
            used = sorted({i for i in map(self.grid_index, drawn) if i is not None})
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
            hparams = dict(zip(self.dims, config, strict=True))
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

    def grid_index(self, hparams: Mapping[str, Any]) -> int | None:
        """The configuration's place in the grid (``sample``'s flat index); None if one of
        its values is not in the space (a journal of another space)."""
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
        names = list(self.params)
        for combo in itertools.product(*self.params.values()):
            yield dict(zip(names, combo, strict=True))


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


def _plain(value: Any) -> Any:
    """Turns NumPy scalars into Python ones so results serialise to JSON."""
    return value.item() if isinstance(value, np.generic) else value
