"""How long a simulated worker takes to train a pack (``executors.simulated``): a table of step
times by member count (``StepTable``) or the cost model fitted to a calibration measured on a
device (``CalibratedCost``). Predictions, never measurements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from packexp.errors import ConfigError, is_number
from packexp.space import Trial

KEY = "executor.durations"
OPTIONAL = ("setup_s", "switch_s", "eval_s")  # seconds, 0 when left out


@dataclass(frozen=True)
class PackShape:
    """What a cost model needs of a trained pack: its members (``group``) with their batch
    sizes, the steps each trained in it, its fusion setting, how many members were built
    afresh (no starting state) and whether their checkpoints are written after it."""

    group: Sequence[Trial]
    batches: Sequence[int]
    steps: Sequence[int]
    fusion: str | None
    builds: int
    checkpoint: bool


@dataclass(frozen=True)
class Predicted:
    """A pack's predicted time by phase, in simulated seconds."""

    setup_s: float  # members built or loaded, programs set up: the record's ``build_s``
    train_s: float
    eval_s: float
    switch_s: float = 0.0  # rebuilds as members whose steps are spent leave
    other_s: float = 0.0  # the rest (checkpoints)
    steps: int = 0  # the pack's steps: its longest member's
    switches: int = 0

    @property
    def total_s(self) -> float:
        return self.setup_s + self.train_s + self.eval_s + self.switch_s + self.other_s


class CostOfPacks(Protocol):
    """A simulated worker's cost model."""

    def predict(self, pack: PackShape, set_up: set[tuple]) -> Predicted:
        """``pack``'s time on a worker that has set up the structures ``set_up`` (updated)."""

    def describe(self) -> dict[str, Any]:
        """The model as ``results.json``'s ``simulation`` states it."""


@dataclass(frozen=True)
class StepTable:
    """Durations from a table: a pack's step by how many members still train in it
    (``step_s``, interpolated between listed counts; beyond the largest, each further member
    adds what the last listed one added, or the whole step of one where one count is listed),
    plus a set-up per pack, a switch per rebuild as members leave, and an evaluation per
    member at the pack's end."""

    step_s: Mapping[int, float]
    setup_s: float = 0.0
    switch_s: float = 0.0
    eval_s: float = 0.0

    def step(self, members: int) -> float:
        """One step of a pack of ``members``, in seconds."""
        table = self.step_s
        counts = sorted(table)
        if members in table:
            return table[members]
        if members < counts[0]:
            return table[counts[0]] * members / counts[0]
        if members > counts[-1]:
            last = counts[-1]
            if len(counts) == 1:
                return table[last] * members / last
            before = counts[-2]
            slope = max(0.0, (table[last] - table[before]) / (last - before))
            return table[last] + slope * (members - last)
        low = max(c for c in counts if c < members)
        high = min(c for c in counts if c > members)
        return table[low] + (table[high] - table[low]) * (members - low) / (high - low)

    def predict(self, pack: PackShape, set_up: set[tuple]) -> Predicted:
        # Members whose steps are spent leave; the rest go on at the smaller pack's step.
        train, done, order = 0.0, 0, sorted(pack.steps)
        for k, steps in enumerate(order):
            train += (steps - done) * self.step(len(order) - k)
            done = steps
        switches = len(set(order)) - 1 if self.switch_s > 0 else 0
        return Predicted(setup_s=self.setup_s, train_s=train, eval_s=self.eval_s * len(order),
                         switch_s=switches * self.switch_s, steps=max(order, default=0),
                         switches=switches)

    def describe(self) -> dict[str, Any]:
        return {"durations": {"step_s": dict(sorted(self.step_s.items())),
                              "setup_s": self.setup_s, "switch_s": self.switch_s,
                              "eval_s": self.eval_s}}


@dataclass(frozen=True)
class CalibratedCost:
    """Durations from the cost model fitted to a calibration measured on a device
    (``strategies.cost_model.CostModel``, the one ``strategy=cost`` plans with): a worker sets a
    structure's programs up once, then reuses them."""

    model: Any  # a CostModel
    path: str

    def predict(self, pack: PackShape, set_up: set[tuple]) -> Predicted:
        model, n = self.model, len(pack.batches)
        fusion = pack.fusion if pack.fusion in ("on", "off") else (
            "on" if n > 1 and "on" in model.modes(pack.group) else "off")
        key = ("looped",) if model.looped and fusion == "off" else (fusion, n)
        new = key not in set_up
        set_up.add(key)
        total = model.duration_s(pack.batches, pack.steps, fusion, new=new, builds=pack.builds,
                                 checkpoint=pack.checkpoint)
        train = model.train_s(pack.batches, pack.steps, fusion)
        e0, e1 = model.evaluate
        checkpoints = n * model.checkpoint_s if pack.checkpoint else 0.0
        return Predicted(setup_s=total - train - (e0 + e1 * n) - checkpoints, train_s=train,
                         eval_s=e0 + e1 * n, other_s=checkpoints,
                         steps=max(pack.steps, default=0))

    def describe(self) -> dict[str, Any]:
        return {"calibration": self.path}


def cost_of(durations: Mapping[str, Any] | None, calibration: str | None) -> CostOfPacks:
    """The cost model ``executor.durations`` (a table) or ``executor.calibration`` (a
    calibration file, which wins) gives; a bad or missing value is a ``ConfigError`` in one
    line naming its key."""
    if calibration:
        return calibrated(str(calibration))
    from omegaconf import DictConfig, OmegaConf  # here: the command's interrupt handling
    # imports the executors before Hydra (``packexp/__main__.py``)

    if isinstance(durations, DictConfig):
        durations = OmegaConf.to_container(durations, resolve=True)
    if durations is None:
        raise ConfigError(f"{KEY}: missing; give step_s, a pack step's seconds by its member "
                          "count ({1: 0.2, 2: 0.25}), or executor.calibration=<a calibration "
                          "file>")
    if not isinstance(durations, Mapping):
        raise ConfigError(f"{KEY}={durations!r}: must be a mapping of step_s, "
                          f"{', '.join(OPTIONAL)}")
    unknown = sorted(str(k) for k in durations if k not in ("step_s", *OPTIONAL))
    if unknown:
        raise ConfigError(f"{KEY}.{unknown[0]}: unknown key; the keys are step_s, "
                          f"{', '.join(OPTIONAL)}")
    if durations.get("step_s") is None:
        raise ConfigError(f"{KEY}.step_s: missing; give a pack step's seconds by its member "
                          "count ({1: 0.2, 2: 0.25})")
    seconds = {key: seconds_at(f"{KEY}.{key}", durations[key], minimum=0.0)
               for key in OPTIONAL if key in durations}
    return StepTable(step_table(durations["step_s"]), **seconds)


def step_table(table: Any) -> dict[int, float]:
    """``step_s`` checked: member counts (integers >= 1) to positive seconds."""
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(f"{KEY}.step_s={table!r}: must map member counts to a step's seconds "
                          "({1: 0.2, 2: 0.25})")
    out = {}
    for count, seconds in table.items():
        # A count given on the command line arrives as a string.
        if isinstance(count, bool) or not str(count).isdigit() or int(count) < 1:
            raise ConfigError(f"{KEY}.step_s: {count!r} is not a member count (an integer "
                              ">= 1)")
        out[int(count)] = seconds_at(f"{KEY}.step_s.{count}", seconds, minimum=None)
    return out


def seconds_at(key: str, value: Any, minimum: float | None) -> float:
    """``value`` as seconds: a number at least ``minimum``, or positive where that is None."""
    if not is_number(value) or (value <= 0 if minimum is None else value < minimum):
        bound = "a positive number" if minimum is None else f"a number >= {minimum:g}"
        raise ConfigError(f"{key}={value!r}: must be {bound} of seconds")
    return float(value)


def calibrated(path: str) -> CalibratedCost:
    """The cost model of the calibration file ``path`` (relative to where the command
    started), as ``strategy=cost`` reads one."""
    from packexp.strategies.calibration import kept_directory, read_calibration
    from packexp.strategies.cost_model import fitted

    where = kept_directory(path)
    if where is None or not where.is_file():
        raise ConfigError(f"executor.calibration={path}: no such file (a strategy=cost run's "
                          "calibration.json, or one under its strategy.calibration_dir)")
    try:
        record, model = read_calibration(where, fitted)
    except ValueError as e:
        raise ConfigError(f"executor.calibration={path}: {e}") from None
    if model is None:
        raise ConfigError(f"executor.calibration={path}: holds no fitted calibration "
                          f"({record.get('why')})")
    return CalibratedCost(model, str(where))
