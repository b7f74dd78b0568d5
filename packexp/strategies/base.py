"""The strategy extension point: group a rung's trials into packs that fit the device."""

from __future__ import annotations

import abc
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from packexp.errors import ConfigError
from packexp.space import Trial, derive_seed


@dataclass(frozen=True)
class Capacity:
    """What one pack may hold: a limit, each trial's cost against it, and a member cap.

    With the default unit cost the limit is a member count; a memory model passes bytes.
    """

    limit: float
    cost: Callable[[Trial], float] = lambda trial: 1.0
    max_members: int | None = None

    def fits(self, group: Sequence[Trial]) -> bool:
        if self.max_members is not None and len(group) > self.max_members:
            return False
        return sum(self.cost(t) for t in group) <= self.limit

    @classmethod
    def members(cls, n: int) -> Capacity:
        return cls(limit=float(n))


@dataclass(frozen=True)
class RungContext:
    """What a rung asks of its packs, for strategies that weigh what packs cost.

    Attributes:
        steps: trial_id to the steps it trains in this rung.
        kept: Pack structures (``space.options.pack_key``) already set up and kept for reuse.
        members: Member structures (``space.options.member_key``) to how many built members
            of each are kept.
        checkpoint: Whether members write a checkpoint after the rung.
        future_trials: Trial trainings the search holds after this rung (all brackets).
        structures: How many member structures the search space holds; ``math.inf`` when
            a float range shapes the model or optimizer.
        replayed: Member structures whose fresh initial weights are replayed, not built.
        model_runtime: The model's hyper-parameters that a built member takes at run time
            (its builder's ``RUNTIME_HPARAMS``), for ``member_key``.
        bucketed: Whether packs run compiled programs of bucketed batch sizes and member
            counts (``space.options.pack_key``).
    """

    steps: Mapping[str, int]
    kept: frozenset[tuple] = frozenset()
    members: Mapping[tuple, int] = field(default_factory=dict)
    checkpoint: bool = True
    future_trials: int = 0
    structures: int | float = 1
    replayed: frozenset[tuple] = frozenset()
    model_runtime: tuple[str, ...] = ()
    bucketed: bool = False


@dataclass(frozen=True)
class Device:
    """The device packs train on, as a strategy that weighs costs prepares for it
    (``WeighsCosts.prepare``).

    Attributes:
        run_dir: The run directory, where a strategy keeps what it measured.
        facts: What a measurement there depends on (device, model and its structure, data
            shape, pack settings); called only by a strategy that measures.
        measure: A calibration measured there (``packing.calibrate.calibrate``), as a plain
            record.
    """

    run_dir: Path
    facts: Callable[[], Mapping[str, Any]]
    measure: Callable[[], dict]


# A planned pack: its trials, and its ``pack.fusion`` setting (None: the run's).
Planned = tuple[list[Trial], str | None]


@runtime_checkable
class WeighsCosts(Protocol):
    """A strategy that weighs measured costs (``strategy=cost``): readied for the device
    before the first rung (a calibration kept or measured there), it predicts each pack's
    duration, and says which calibration it planned with."""

    def prepare(self, device: Device) -> None:
        """Readies the strategy for the device packs train on, before the first rung."""

    def calibration_used(self) -> dict[str, str] | None:
        """The calibration ``prepare`` planned with (key, digest, source, path)."""

    def predict(self, trials: Sequence[Trial], fusion: str | None,
                rung: RungContext) -> float | None:
        """A pack's predicted duration in seconds."""


class Strategy(abc.ABC):
    """Partitions trials into packs; pure Python, deterministic under its seed.

    A strategy may choose each pack's fusion setting (``plan``); one that weighs measured
    costs implements ``WeighsCosts`` too.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def plan(self, trials: Sequence[Trial], capacity: Capacity,
             rung: RungContext) -> list[Planned]:
        """The rung's packs, each with its fusion setting; by default ``pack``'s, as configured."""
        return [(group, None) for group in self.pack(trials, capacity)]

    @abc.abstractmethod
    def pack(self, trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
        """Groups ``trials`` into packs.

        Args:
            trials: The rung's trials.
            capacity: What one pack may hold.

        Returns:
            Packs that together hold every trial exactly once, none over capacity.
        """

    def _rng(self, trials: Sequence[Trial]) -> np.random.Generator:
        # Seeded by the root seed and the trials themselves, never by call order, so a
        # resumed run re-derives the same packs.
        ids = ",".join(sorted(t.trial_id for t in trials)).encode()
        return np.random.default_rng(derive_seed(self.seed, zlib.crc32(ids)))


def greedy_fill(trials: Sequence[Trial], capacity: Capacity) -> list[list[Trial]]:
    """Fills packs in the given order, opening a new pack when the next trial does not fit."""
    packs: list[list[Trial]] = []
    for trial in trials:
        if packs and capacity.fits([*packs[-1], trial]):
            packs[-1].append(trial)
        else:
            packs.append([trial])
    return packs


def check_fits(trials: list[Trial], capacity: Capacity, source: str) -> None:
    """A member that cannot fit even alone is a config error naming both numbers."""
    for t in trials:
        if not capacity.fits([t]):
            raise ConfigError(
                f"{source}: {capacity.limit / 2**20:.2f} MB is smaller than one member "
                f"({t.trial_id}, batch {t.hparams['batch_size']}, needs "
                f"{capacity.cost(t) / 2**20:.1f} MB)")


def check_partition(trials: list[Trial], packs: list[list[Trial]], capacity: Capacity) -> None:
    """Guards the strategy contract: each trial in exactly one pack, none over capacity."""
    placed = sorted(t.trial_id for p in packs for t in p)
    if placed != sorted(t.trial_id for t in trials):
        raise RuntimeError("strategy returned packs that do not hold each trial exactly once")
    if any(len(p) > 1 and not capacity.fits(p) for p in packs):
        raise RuntimeError("strategy returned a pack over capacity")
