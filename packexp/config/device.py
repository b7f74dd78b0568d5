"""The device a search runs on: how many bytes one pack may use, and the capacity the
strategies plan against (member costs estimated, and probed where it matters)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packexp import telemetry
from packexp.config.hparams import model_hparams
from packexp.errors import ConfigError, positive_int
from packexp.files import write_json
from packexp.space import Trial
from packexp.strategies import Capacity

PROBE_MARGIN = 16  # the CPU probes measured up to ~15x the estimate for tiny models
PROBE_VERSION = 1  # of what a kept probe depends on and holds: a change probes again
RUN_PROBES = "memory_probes.json"  # the run directory's copy
CPU_BUDGET = "device.memory_budget_mb"  # the setting a CPU's capacity comes from

log = logging.getLogger(__name__)


@dataclass
class ProbeFiles:
    """Where a run's memory probes are kept: the run directory's copy (a resumed run plans
    with it and probes nothing again) and, with ``kept_dir`` (``device.probe_dir``), a copy
    kept across runs for the same facts (device, model, data shape, pack settings, library
    versions).

    A kept probe stands in for a probe only where the run would have measured one (the
    memory model asks for it): its measured-to-estimate factor is taken instead of training
    a probe member, so a search that would not probe plans on the estimate whatever ran
    before, and one that would plans with the first run's measurement, not a new one's
    noise. A file that cannot be read, or that holds probes of other facts, is passed over
    with one warning, and the probe measured instead replaces it.

    Attributes:
        source: Where the probes a run planned with came from: ``run``, ``kept`` or
            ``measured``; None while it has none.
        path: That file (for ``measured``, the run directory's copy).
        seconds: The probes' clock (``device_capacity``'s).
    """

    run_dir: Path
    kept_dir: Path | None = None
    facts: Mapping[str, Any] | None = None
    source: str | None = None
    path: Path | None = None
    seconds: Callable[[], float] = lambda: 0.0

    @property
    def key(self) -> str:
        text = json.dumps({"probe": PROBE_VERSION, **dict(self.facts or {})}, sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def run_file(self) -> Path:
        return self.run_dir / RUN_PROBES

    @property
    def kept_file(self) -> Path | None:
        return None if self.kept_dir is None else self.kept_dir / f"{self.key}.json"

    def read_run(self) -> dict[int, tuple[int, int]] | None:
        """The run's own probes (a resume plans with them); None where it has none."""
        probes = self._read(self.run_file, None)
        if probes is not None:
            self.source, self.path = "run", self.run_file
        return probes

    def kept_factor(self) -> float | None:
        """The measured-to-estimate factor of the probe kept for these facts; None where
        none can be used."""
        if self.kept_file is None:
            return None
        probes = self._read(self.kept_file, self.key)
        if probes is None:
            return None
        estimate, measured = next(iter(probes.values()))
        return measured / estimate

    def keep(self, probes: Mapping[int, tuple[int, int]]) -> None:
        """A probe taken now: in the run directory; measured (not read from the kept file),
        also kept for the next run."""
        write_json(self.run_file, _probes_json(probes))
        if self.source == "kept":
            return
        self.source, self.path = "measured", self.run_file
        if self.kept_file is not None:
            write_json(self.kept_file, {"key": self.key, "facts": dict(self.facts or {}),
                                        "probes": _probes_json(probes)})

    def summary(self) -> dict[str, str] | None:
        """What ``results.json`` records: where the probes came from; None for none."""
        return None if self.source is None else {"source": self.source, "path": str(self.path)}

    @staticmethod
    def _read(path: Path, key: str | None) -> dict[int, tuple[int, int]] | None:
        if not path.exists():
            return None
        try:
            return _read_probes(path, key)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("memory probes %s: %s; probing again", path, e)
            return None


def _probes_json(probes: Mapping[int, tuple[int, int]]) -> dict[str, list[int]]:
    return {str(b): list(v) for b, v in probes.items()}


def _read_probes(path: Path, key: str | None) -> dict[int, tuple[int, int]]:
    """``{batch: (estimate, measured)}`` from ``path``; with ``key``, a kept file's, which
    must have been kept for that key."""
    data = json.loads(path.read_text())
    if key is not None:
        if data.get("key") != key:
            raise ValueError(f"kept for other facts (key {data.get('key')!r}, not {key!r})")
        data = data["probes"]
    probes = {int(b): (int(e), int(m)) for b, (e, m) in data.items()}
    if not probes or any(b < 1 or e < 1 or m < 0 for b, (e, m) in probes.items()):
        raise ValueError("no usable probe in it")
    return probes


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
                    on_device: Callable[..., Any], probes: ProbeFiles | None = None
                    ) -> tuple[Capacity, str, Callable[[], float]]:
    """Memory capacity of one pack, with member costs from the estimate and its probes.

    The estimate is built here; the limit and the probes come from where packs train:
    ``on_device(fn, *args)`` runs ``fn(cache, *args)`` with that place's ``PackCache``
    (``Executor.on_device``). With ``probes``, the probes are kept in its files (per batch
    size) and read back instead of probing again: by a resumed run, and, from the copy
    kept across runs, by the next run for the same facts (``device.probe`` true or auto).

    Returns:
        The capacity, the setting it comes from, and a clock of the probes' time so far.
    """
    from packexp.packing.memory import MemoryModel

    if device.probe not in (True, False, "auto"):
        raise ConfigError(f"device.probe={device.probe!r}: must be true, false or auto")
    limit, source = on_device(limit_here, OmegaConf.to_container(device, resolve=True))
    spent = [0.0]

    def probe(trial: Trial) -> int:
        factor = None if probes is None else probes.kept_factor()
        if factor is not None:  # the first run's measurement, not a new one
            probes.source, probes.path = "kept", probes.kept_file
            log.info("memory probe, batch %s: the factor kept in %s", trial.batch_size,
                     probes.kept_file)
            return round(memory.estimate(trial) * factor)
        t0 = time.perf_counter()
        try:
            return on_device(probe_here, trial)
        finally:
            spent[0] += time.perf_counter() - t0

    def worth_probing(estimate: int) -> bool:
        return probe_worth_it(device.probe, estimate, max_members, limit, source)

    # A resumed run plans with its own probes (even under probe=false, which trusts the
    # estimate and takes no kept probe either).
    known = None if probes is None else probes.read_run()
    memory = MemoryModel(lambda t: make_member(t).model, probe if device.probe else None,
                         worth_probing, known, None if probes is None else probes.keep,
                         architecture=architecture)
    return (Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source,
            lambda: spent[0])


def probe_worth_it(setting: bool | str, estimate: int, max_members: int, limit: float,
                   source: str) -> bool:
    """Whether ``device.probe`` (``setting``) asks for a probe of a member estimated at
    ``estimate`` bytes, against ``limit`` bytes from ``source`` (``device_limit``'s).

    ``auto`` probes a GPU where a full pack, by the estimate, could come within
    ``PROBE_MARGIN`` of its memory: far below, no probe changes a plan. A CPU's limit is a
    budget of host memory (``device.memory_budget_mb``), where a probe reads the process's
    resident set, which the allocator's reuse keeps almost flat, and costs a member trained
    alone (20 s for MobileNetV2 on digits in the headline's first run, issue 69): there
    ``auto`` probes only where a full pack's estimate alone reaches the budget.
    """
    if setting is True or setting is False:
        return setting
    margin = 1 if source.startswith(CPU_BUDGET) else PROBE_MARGIN
    return estimate * max_members * margin >= limit


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
    return telemetry.device_facts()


def device_limit(device: DictConfig) -> tuple[int, str]:
    """Bytes one pack may use on the device, and the setting they come from."""
    try:
        return device_capacity_bytes(device.memory_budget_mb, device.gpu_memory_fraction)
    except ValueError as e:
        raise ConfigError(f"device.{e}") from None



def device_capacity_bytes(memory_budget_mb: float | None,
                          gpu_fraction: float = 0.9) -> tuple[int, str]:
    """Memory one pack may use: a share of the GPU memory this process may hold (NVML's
    free memory, or a Ray actor's share), else the budget.

    Returns:
        The bytes, and the setting they come from, for error messages.
    """
    gpu = telemetry.gpu_budget()
    if gpu is not None:
        if not _positive(gpu_fraction) or gpu_fraction > 1:
            raise ValueError(f"gpu_memory_fraction={gpu_fraction!r}: must be in (0, 1]")
        available, source = gpu
        return int(available * gpu_fraction), (
            f"device.gpu_memory_fraction={gpu_fraction} of {source}")
    if not _positive(memory_budget_mb):
        raise ValueError(f"memory_budget_mb={memory_budget_mb!r}: a CPU needs a positive "
                         "number of MB")
    return int(memory_budget_mb * 2**20), f"{CPU_BUDGET}={memory_budget_mb}"


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
