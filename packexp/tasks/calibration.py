"""A cost-weighing strategy's calibration: the facts it depends on, kept or measured, and
fitted (``strategy=cost``; the measuring itself is ``packexp/packing/calibrate.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from packexp.config import component_name, pack_settings
from packexp.errors import ConfigError
from packexp.hyperband import Hyperband, steps_for
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, Strategy
from packexp.telemetry import DeviceFacts

log = logging.getLogger(__name__)


def calibration_facts(cfg: DictConfig, scheduler: Hyperband, space: SearchSpace, dataset: Any,
                      max_members: int, device: DeviceFacts) -> dict:
    """What a calibration depends on: device, model, data shape, structure, pack settings."""
    import tensorflow as tf

    first = space.first
    train_size = len(dataset.x_train)
    return {
        # The device packs train on: a Ray worker sees its own GPU, a local run them all.
        "device": {"cpu": device.cpu, "onednn": device.onednn,
                   "gpu": device.gpus[0] if device.gpus else None},
        "tensorflow": tf.__version__,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "dataset": {"name": dataset.name, "input_shape": list(dataset.input_shape),
                    "val_size": len(dataset.x_val)},
        "structure": {k: v for k, v in first.items() if k != "batch_size"},
        "batch_sizes": sorted(space.params["batch_size"]),
        "preprocess": OmegaConf.to_container(cfg.preprocess, resolve=True),
        "pack": {**pack_settings(cfg.pack), "max_members": max_members},
        "longest_steps": steps_for(scheduler.R, min(space.params["batch_size"]), train_size),
    }



def use_calibration(cfg: DictConfig, strategy: Strategy, scheduler: Hyperband,
                    space: SearchSpace, dataset: Any, max_members: int, run_dir: Path,
                    device: DeviceFacts, measure: Callable[[], dict] | None) -> None:
    """Gives a cost-weighing strategy its calibration for ``device`` (where packs train):
    kept, or measured with ``measure``."""
    from packexp.packing.calibrate import calibration_key, load_or_calibrate

    facts = calibration_facts(cfg, scheduler, space, dataset, max_members, device)
    directory = getattr(strategy, "calibration_dir", None)
    kept = Path(hydra.utils.to_absolute_path(directory)) if directory else None
    if measure is None:  # task=plan trains nothing: a kept calibration or none
        path = kept / f"{calibration_key(facts)}.json" if kept else None
        if path is None or not path.exists():
            raise ConfigError(f"strategy={component_name(cfg, 'strategy')}: no calibration "
                              f"for this device and structure in {kept}; a search "
                              "(task=tune) measures one")
        fit_costs(strategy, json.loads(path.read_text()), path)
        return
    record, measured = load_or_calibrate(run_dir / "calibration.json", kept, facts, measure,
                                         fresh=bool(getattr(strategy, "recalibrate", False)))
    fit_costs(strategy, record, run_dir / "calibration.json")
    error = strategy.costs.error
    log.info("cost model: calibration %s, %s; step times fitted within %.0f%% (median), "
             "%.0f%% (max) over %d packs", record["key"],
             f"measured in {record['seconds']:.1f} s" if measured else "kept from before",
             100 * error["median"], 100 * error["max"], error["packs"])



def fit_costs(strategy: Strategy, record: dict, path: Path) -> None:
    try:
        strategy.use_costs(record)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not a calibration packexp can read ({type(e).__name__}: "
                          f"{e}); delete it to measure again") from None



def calibration_args(scheduler: Hyperband, space: SearchSpace, capacity: Capacity,
                     max_members: int, train_size: int) -> tuple:
    """``calibrate_here``'s arguments, worked out where the search is planned: which of the
    packs a calibration may measure fit the device is answered here, by the memory model."""
    batch_sizes = list(space.params["batch_size"])
    first = space.first
    measured = (sorted(batch_sizes)[len(batch_sizes) // 2], max(batch_sizes))  # calibrate's
    fits = {(n, b): capacity.fits([Trial(f"fits-{i}", {**first, "batch_size": b}, (), seed=i)
                                   for i in range(n)])
            for n in range(2, min(max_members, 8) + 1) for b in dict.fromkeys(measured)}
    return (first, batch_sizes, max_members, Fits(fits),
            steps_for(scheduler.R, min(batch_sizes), train_size))


@dataclass(frozen=True)
class Fits:
    """Whether ``n`` members of one structure at batch size ``b`` fit: ``table[(n, b)]``."""

    table: Mapping[tuple[int, int], bool]

    def __call__(self, group: Sequence[Trial]) -> bool:
        return self.table[len(group), int(group[0].hparams["batch_size"])]


def calibrate_here(cache: Any, hparams: Mapping[str, Any], batch_sizes: Sequence[int],
                   max_members: int, fits: Fits, longest_steps: int) -> dict:
    """A calibration measured on this process's device (``Executor.on_device``)."""
    from packexp.packing.calibrate import calibrate

    log.info("cost model: calibrating on this device")
    return calibrate(cache, hparams, batch_sizes, max_members, fits, longest_steps)
