"""A cost-weighing strategy's calibration: the facts it depends on, kept or measured, and
fitted (``strategy=cost``; the measuring itself is ``packexp/packing/calibrate.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from packexp.config import pack_settings
from packexp.errors import ConfigError
from packexp.hyperband import Hyperband, steps_for
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, Strategy
from packexp.telemetry import DeviceFacts

log = logging.getLogger(__name__)


def calibration_facts(cfg: DictConfig, scheduler: Hyperband, space: SearchSpace, dataset: Any,
                      max_members: int, device: DeviceFacts) -> dict:
    """What a calibration depends on: the device, the model and its member structure (the
    search space's first configuration but its runtime hyper-parameters), the data's shape,
    the batch bucket and the pack settings. Not R, the seed or the other values of the
    space: every search of the same architecture on the same device reuses it."""
    import tensorflow as tf

    from packexp.config import batch_bucket, instantiate
    from packexp.models import runtime_hparams
    from packexp.search_space import member_key

    first = Trial("first", space.first, ())
    structure = dict(member_key(first, model=runtime_hparams(instantiate(cfg.model, "model"))))
    return {
        # The device packs train on: a Ray worker sees its own GPU, a local run them all.
        "device": {"cpu": device.cpu, "onednn": device.onednn,
                   "gpu": device.gpus[0] if device.gpus else None},
        "tensorflow": tf.__version__,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "dataset": {"name": dataset.name, "input_shape": list(dataset.input_shape),
                    "val_size": len(dataset.x_val)},
        "structure": structure,
        "batch_bucket": batch_bucket(space),
        "preprocess": OmegaConf.to_container(cfg.preprocess, resolve=True),
        "pack": {**{k: v for k, v in pack_settings(cfg.pack).items() if k != "reuse"},
                 "max_members": max_members},
        "threads": [cfg.device.get("intra_op_threads"), cfg.device.get("inter_op_threads")],
    }



def use_calibration(cfg: DictConfig, strategy: Strategy, scheduler: Hyperband,
                    space: SearchSpace, dataset: Any, max_members: int, run_dir: Path,
                    device: DeviceFacts, measure: Callable[[], dict]) -> None:
    """Gives a cost-weighing strategy its calibration for ``device`` (where packs train):
    kept, or measured with ``measure``."""
    from packexp.packing.calibrate import load_or_calibrate

    facts = calibration_facts(cfg, scheduler, space, dataset, max_members, device)
    directory = getattr(strategy, "calibration_dir", None)
    kept = Path(hydra.utils.to_absolute_path(directory)) if directory else None
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
