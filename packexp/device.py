"""The device a search runs on: how many bytes one pack may use, and the capacity the
strategies plan against (member costs estimated, and probed where it matters)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packexp.checks import positive_int
from packexp.config import model_hparams
from packexp.errors import ConfigError
from packexp.files import write_json
from packexp.search_space import Trial
from packexp.strategies import Capacity

PROBE_MARGIN = 16  # the CPU probes measured up to ~15x the estimate for tiny models


def apply_threads(device: Any) -> None:
    """Sets TensorFlow's intra-op and inter-op thread counts from ``device.intra_op_threads``
    and ``device.inter_op_threads`` (null: TensorFlow's default, every core), before its
    runtime starts; a process whose runtime already runs keeps its counts (logged)."""
    intra, inter = device.get("intra_op_threads"), device.get("inter_op_threads")
    for key, value in (("intra_op_threads", intra), ("inter_op_threads", inter)):
        positive_int(f"device.{key}", value, optional=True, error=ConfigError)
    if intra is None and inter is None:
        return
    import tensorflow as tf

    try:
        if intra is not None:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter is not None:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        logging.getLogger(__name__).info(
            "TensorFlow's runtime already runs: thread counts stay as they are")


def architecture(trial: Trial) -> str:
    """The model hyper-parameters that may size a trial's model (a width, a depth), for
    ``MemoryModel``: an activation function changes no count, and a MobileNetV2 build costs
    2 s on a CPU."""
    sizes = {k: v for k, v in model_hparams(trial.hparams).items() if k != "activation"}
    return repr(sorted(sizes.items()))



def device_capacity(device: DictConfig, max_members: int, make_member: Callable,
                    on_device: Callable[..., Any], probes_file: Path | None = None
                    ) -> tuple[Capacity, str, Callable[[], float]]:
    """Memory capacity of one pack, with member costs from the estimate and its probes.

    The estimate is built here; the limit and the probes come from where packs train:
    ``on_device(fn, *args)`` runs ``fn(cache, *args)`` with that place's ``PackCache``
    (``Executor.on_device``). With ``probes_file``, the probes are kept there (per batch
    size) and a resumed run reads them back instead of probing again.

    Returns:
        The capacity, the setting it comes from, and a clock of the probes' time so far.
    """
    from packexp.packing.memory import MemoryModel

    if device.probe not in (True, False, "auto"):
        raise ConfigError(f"device.probe={device.probe!r}: must be true, false or auto")
    limit, source = on_device(limit_here, OmegaConf.to_container(device, resolve=True))
    spent = [0.0]

    def probe(trial: Trial) -> int:
        t0 = time.perf_counter()
        try:
            return on_device(probe_here, trial)
        finally:
            spent[0] += time.perf_counter() - t0

    def worth_probing(estimate: int) -> bool:
        # auto: a probe only matters where a full pack, by the estimate, could come within
        # PROBE_MARGIN of the capacity; far below it, no probe result changes a plan.
        return device.probe is True or estimate * max_members * PROBE_MARGIN >= limit

    known = None
    if probes_file is not None and probes_file.exists():
        known = {int(b): (int(e), int(m))
                 for b, (e, m) in json.loads(probes_file.read_text()).items()}

    def keep(probes: dict[int, tuple[int, int]]) -> None:
        if probes_file is not None:
            write_json(probes_file, {str(b): list(v) for b, v in probes.items()})

    memory = MemoryModel(lambda t: make_member(t).model, probe if device.probe else None,
                         worth_probing, known, keep, architecture=architecture)
    return (Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source,
            lambda: spent[0])


def on_cache(cache: Any) -> Callable[..., Any]:
    """``on_device`` for packs trained in this process with ``cache``."""
    return lambda fn, *args: fn(cache, *args)


# Run where packs train (``on_device``), so a Ray actor answers for its own device.

def limit_here(cache: Any, device: Mapping[str, Any]) -> tuple[int, str]:
    """``device_limit`` of this process's device."""
    return device_limit(OmegaConf.create(dict(device)))


_warmed: list[bool] = []  # whether this process has paid TensorFlow's one-off pack set-up


def probe_here(cache: Any, trial: Trial) -> int:
    """Peak memory, in bytes, of ``trial``'s member trained alone on this process's device."""
    from packexp.packing.trainer import probe_member

    if not _warmed:  # the first pack in a process pays TensorFlow's one-off set-up
        probe_member(trial, cache.make_member, cache.data, cache.pack_options)
        _warmed.append(True)
    return probe_member(trial, cache.make_member, cache.data, cache.pack_options)


def facts_here(cache: Any) -> Any:
    """This process's ``telemetry.DeviceFacts``."""
    from packexp.telemetry import device_facts

    return device_facts()


def device_limit(device: DictConfig) -> tuple[int, str]:
    """Bytes one pack may use on the device, and the setting they come from."""
    from packexp.packing.memory import device_capacity_bytes

    try:
        return device_capacity_bytes(device.memory_budget_mb, device.gpu_memory_fraction)
    except ValueError as e:
        raise ConfigError(f"device.{e}") from None



def planning_capacity(device: DictConfig, build_model: Callable, dataset: Any,
                      max_members: int) -> tuple[Capacity, str]:
    """The device capacity with estimated member costs (no probe: planning trains nothing)."""
    from packexp.packing.memory import MemoryModel

    limit, source = device_limit(device)
    memory = MemoryModel(lambda t: build_model(dataset.input_shape, dataset.num_classes,
                                               t.hparams), architecture=architecture)
    return Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source
