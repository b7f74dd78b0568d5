"""The kinds of a search space's hyper-parameters: a value list (``Choice``), an int range
(``IntRange``) and a float range (``FloatRange``), each with its draws, its grid values and
its kNN coordinate; ``dimension`` reads one from the config."""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

import numpy as np

from packexp.errors import ConfigError


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


def _plain(value: Any) -> Any:
    """Turns NumPy scalars into Python ones so results serialise to JSON."""
    return value.item() if isinstance(value, np.generic) else value
