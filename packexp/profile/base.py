"""The profile extension point: ``Profile``, and the ``ProfileContext`` it measures on."""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from packexp.data import Dataset
from packexp.errors import is_number as finite
from packexp.errors import positive_int
from packexp.packing import DeviceData, Member
from packexp.packing.data import Preprocessing
from packexp.space import Trial, derive_seed

MB = 2**20
OK = "ok"
OUT_OF_MEMORY = "out_of_memory"


@dataclass
class ProfileContext:
    """What a profile measures on: the configured data, model, device and pack settings.

    Attributes:
        cfg: The composed config.
        dataset: The configured dataset, as arrays.
        build_model: The configured model builder ``(input_shape, classes, hparams)``.
        names: Config names of ``model`` and ``dataset``.
        pack_options: The pack settings from ``cfg.pack``, checked (``PackSettings.from_config``
            reads them).
        run_dir: Where the profile writes its outputs.
    """

    cfg: DictConfig
    dataset: Dataset
    build_model: Callable[..., Any]
    names: dict[str, str]
    pack_options: dict[str, Any]
    run_dir: Path
    _data: DeviceData | None = field(default=None, repr=False)
    _capacity: Any = field(default=None, repr=False)

    @classmethod
    def from_config(cls, cfg: DictConfig, run_dir: Path) -> ProfileContext:
        from packexp.config import (
            check_pairing,
            component_name,
            instantiate,
            model_node,
            pack_settings,
        )

        dataset = instantiate(cfg.dataset, "dataset")
        build_model = instantiate(model_node(cfg), "model")
        check_pairing(cfg, build_model, dataset)
        names = {g: component_name(cfg, g) for g in ("model", "dataset")}
        return cls(cfg, dataset, build_model, names, pack_settings(cfg.pack), Path(run_dir))

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    @property
    def data(self) -> DeviceData:
        """The dataset on the device, placed once for the whole profile."""
        if self._data is None:
            self._data = DeviceData(self.dataset)
        return self._data

    def node(self, group: str) -> dict[str, Any]:
        """The resolved config of ``group``, for worker processes to instantiate."""
        return OmegaConf.to_container(self.cfg[group], resolve=True)

    def trial(self, index: int, hparams: Mapping[str, Any], prefix: str = "m") -> Trial:
        """Trial ``index`` with its own seed (initial weights and data order)."""
        return Trial(f"{prefix}{index}", dict(hparams), (), seed=derive_seed(self.seed, index))

    def member(self, trial: Trial, build_model: Callable[..., Any] | None = None,
               train_size: int | None = None, preprocessing: Preprocessing | None = None,
               member_cls: type[Member] = Member) -> Member:
        """Builds ``trial``'s member over the configured data (or ``train_size`` examples)."""
        return member_cls.create(trial, build_model or self.build_model, self.dataset.input_shape,
                                 self.dataset.num_classes, train_size or self.data.train_size,
                                 preprocessing)

    def memory_limit(self) -> tuple[int, str]:
        """Bytes one pack may use on this device, and the setting they come from."""
        from packexp.config.device import device_limit

        return device_limit(self.cfg.device)

    def predicted_bytes(self, trials: Sequence[Trial], largest: int | None = None) -> float:
        """The memory model's cost of packing ``trials``: the estimate, checked by a probe.

        It is the tuner's own model (``device.probe`` decides whether a probe checks it),
        so a profile stops where a search would stop packing.

        Args:
            trials: The pack's members.
            largest: The most members any pack of this profile holds (for ``probe=auto``,
                which probes where such a pack could come near the limit); fixed at the
                first call.

        Returns:
            Bytes.
        """
        if self._capacity is None:
            from packexp.config.device import device_capacity, on_cache
            from packexp.packing.cache import PackCache

            place = on_cache(PackCache(self.member, self.data, self.pack_options, keep=0))
            self._capacity, _, _ = device_capacity(self.cfg.device, largest or len(trials),
                                                   self.member, place)
        return float(sum(self._capacity.cost(t) for t in trials))


def hparams(batch_size: int, optimizer: str, learning_rate: float,
            activation: str) -> dict[str, Any]:
    return {"batch_size": int(batch_size), "optimizer": optimizer,
            "learning_rate": float(learning_rate), "activation": activation}


class Profile(abc.ABC):
    """One of the paper's micro-benchmarks: measures points, then draws them.

    Args:
        steps: Steps per timed chunk (one timing is the median step time of a chunk).
        warmup_steps: Steps run after compiling and before any timing.
        repeats: Timed chunks per figure; figures are medians over repeats.
        xla: XLA settings to try; each step time is the faster of them.
        optimizer: Every member's optimizer, unless the profile varies it.
        learning_rate: Every member's learning rate.
        activation: Every member's activation.
    """

    name: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    # Columns logged to MLflow, one metric per measured point.
    metric_columns: ClassVar[tuple[str, ...]] = ()
    # Columns of the table printed at the end; all of ``columns`` when None.
    shown_columns: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, steps: int = 100, warmup_steps: int = 20, repeats: int = 5,
                 xla: Sequence[bool] = (False, True), optimizer: str = "adam",
                 learning_rate: float = 1e-3, activation: str = "relu") -> None:
        self.steps = positive_int("steps", steps)
        self.warmup_steps = positive_int("warmup_steps", warmup_steps, minimum=0)
        self.repeats = positive_int("repeats", repeats)
        xla = list(xla) if isinstance(xla, Sequence) and not isinstance(xla, str) else [xla]
        if not xla or any(not isinstance(x, bool) for x in xla):
            raise ValueError(f"xla={xla!r}: must be a non-empty list of true/false")
        self.xla = tuple(dict.fromkeys(xla))
        from packexp.space.options import OPTIMIZERS as NAMES

        if optimizer not in NAMES:
            raise ValueError(f"optimizer={optimizer!r}: must be one of {list(NAMES)}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, int | float) \
                or not learning_rate > 0:
            raise ValueError(f"learning_rate={learning_rate!r}: must be a positive number")
        self.optimizer = optimizer
        self.learning_rate = float(learning_rate)
        self.activation = activation

    def hparams(self, batch_size: int, optimizer: str | None = None) -> dict[str, Any]:
        return hparams(batch_size, optimizer or self.optimizer, self.learning_rate,
                       self.activation)

    @abc.abstractmethod
    def measure(self, ctx: ProfileContext) -> list[dict[str, Any]]:
        """Measures every point.

        Args:
            ctx: The configured data, model and device.

        Returns:
            One row per measured point, keyed by ``columns``.
        """

    @abc.abstractmethod
    def plot(self, rows: Sequence[Mapping[str, Any]], path: Path, ctx: ProfileContext) -> Path:
        """Draws the profile's figure into ``path`` (PNG) and returns it."""

    def objective(self, rows: Sequence[Mapping[str, Any]]) -> float:
        """The number ``python -m packexp`` returns: the best IMPV measured."""
        values = [r["impv"] for r in rows if finite(r.get("impv"))]
        return max(values) if values else math.nan

    def point_label(self, row: Mapping[str, Any]) -> str:
        return f"n{row.get('num_models')}_b{row.get('batch_size')}"

    def metrics(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """One MLflow metric per measured point and column of ``metric_columns``."""
        out: dict[str, float] = {}
        for row in rows:
            label = self.point_label(row)
            for column in self.metric_columns:
                if finite(row.get(column)):
                    out[f"{column}.{label}"] = float(row[column])
        return out
