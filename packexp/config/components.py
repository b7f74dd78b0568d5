"""A search's components built from its config, in one place: the dataset, the model
builder, the search space, scheduler and strategy, the pack cache, the executor and the
listeners. The tasks build them here, and so do Ray workers (``worker_cache``), so a pack
trains the same wherever it trains."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from packexp.config.checks import check_batch_sizes, check_pairing, check_search, head_of
from packexp.config.choices import component_name
from packexp.config.device import ProbeFiles, apply_threads, device_capacity, facts_here
from packexp.config.preprocessing import check_preprocessing, preprocessing_for
from packexp.config.probes import probe_model
from packexp.config.run import RunSettings
from packexp.config.settings import (
    batch_bucket,
    member_cap,
    pack_settings,
    reuse_setting,
    surrogate_of,
)
from packexp.config.targets import instantiate, load_dataset, model_node
from packexp.events import Listener
from packexp.executors.base import DeviceReport, Trainer, tensorflow_trainer
from packexp.models.narrowed import narrowed
from packexp.objectives import NO_HEAD, Head, Objective
from packexp.samplers import Sampler
from packexp.schedulers import Scheduler
from packexp.space import SearchSpace, Trial
from packexp.space.options import steps_for
from packexp.startup import mark
from packexp.strategies import Capacity, Device, Strategy, WeighsCosts
from packexp.strategies.calibration import kept_directory

log = logging.getLogger(__name__)


@dataclass
class Components:
    """What a search is made of, instantiated from ``cfg`` and checked. A trainer that measures
    its device (TensorFlow's) hands its device calls (``executors.Trainer``) to these parts:
    ``set_up_device``, ``pack_cache``, ``measured_facts``, ``measure_device``.

    Attributes:
        names: The config files chosen for strategy, model and dataset (run names, tags).
    """

    cfg: DictConfig
    space: SearchSpace
    scheduler: Scheduler
    strategy: Strategy
    sampler: Sampler
    objective: Objective
    dataset: Any
    build_model: Callable[..., Any]
    max_members: int
    names: dict[str, str]
    head: Head = NO_HEAD  # the model's own loss and metrics
    trainer: Trainer = field(default_factory=tensorflow_trainer)  # what trains the packs

    @functools.cached_property
    def run(self) -> RunSettings:
        """The config's top-level settings (seed, budget, keep, refit, summary, probes,
        resume), read once."""
        return RunSettings.of(self.cfg)

    @classmethod
    def build(cls, cfg: DictConfig, probe: bool = True,
              trainer: Trainer | None = None) -> Components:
        """Instantiates and checks the search's parts; with ``probe``, builds the model for
        every value of its hyper-parameters so a bad one fails before any training
        (``Trainer.set_up``). ``trainer`` trains the packs (TensorFlow's when None); without
        one, the executor's config may name it (``named_trainer``)."""
        trainer = trainer if trainer is not None else named_trainer(cfg) or tensorflow_trainer()
        space, scheduler, strategy, objective = check_search(cfg)
        sampler = instantiate(cfg.sampler, "sampler")
        dataset = load_dataset(cfg, objective)
        mark("data")
        build_model = instantiate(model_node(cfg), "model")
        build_model = narrowed(build_model, surrogate_of(cfg))  # stand-ins but the transfer's
        head = head_of(cfg, objective)
        check_pairing(cfg, build_model, dataset)
        check_batch_sizes(space, dataset)
        parts = cls(cfg, space, scheduler, strategy, sampler, objective, dataset, build_model,
                    member_cap(cfg.pack.max_members),
                    {g: component_name(cfg, g) for g in ("strategy", "model", "dataset")}, head,
                    trainer)
        trainer.set_up(parts, probe)
        check_preprocessing(cfg.preprocess, space, dataset.input_shape)
        mark("model")
        return parts

    def set_up_device(self, probe: bool) -> None:
        """Readies this process to train on a measured device: TensorFlow's thread counts set
        before its runtime starts; with ``probe``, the model built for every value of its
        hyper-parameters."""
        apply_threads(self.cfg.device)
        if probe:
            probe_model(self.build_model, self.dataset, self.space)

    def facts(self) -> dict[str, Any]:
        """The search's names, seed and schedule, as ``results.json`` states them."""
        scheduler = self.scheduler
        return {**self.names, "sampler": component_name(self.cfg, "sampler"),
                "scheduler": component_name(self.cfg, "scheduler"),
                "seed": self.run.seed, "R": scheduler.R, "eta": scheduler.eta,
                "continue_on_promotion": scheduler.continue_on_promotion,
                "lr_horizon": scheduler.lr_horizon,
                **({"surrogate": dataclasses.asdict(s)} if (s := self.run.surrogate).on
                   else {})}

    @property
    def run_name(self) -> str:
        """``<strategy>-s<seed>-<model>-<dataset>[-<data file>]-<objective>-<scheduler>-
        <budget>``, so that searches of other data or goals are told apart, and a sweep's by
        the words the MLflow UI's runs table shows of a name (about 18 characters): the data
        file is ``dataset.path``'s stem (a folder's name), the objective its metrics without
        ``val_`` joined by ``+`` (``accuracy``, ``mse``, ``accuracy+params``), and the budget
        ``R<R>`` or a population's ``P<population>E<epochs>``."""
        n, budget = self.names, self.scheduler.budget_name
        data = data_file(self.cfg.dataset.get("path"))
        objective = "+".join(name.removeprefix("val_") for name, _ in self.objective.goals)
        return (f"{n['strategy']}-s{self.run.seed}-{n['model']}-{n['dataset']}"
                f"{f'-{data}' if data else ''}-{objective}-"
                f"{component_name(self.cfg, 'scheduler')}-{budget}")

    def cache(self, dataset: Any = None) -> Any:
        """The trainer's cache in this process for the search's dataset (``dataset``: another
        of the same shape instead, a refit's training and validation rows):
        ``Trainer.cache``."""
        return self.trainer.cache(self, self.dataset if dataset is None else dataset)

    def pack_cache(self, dataset: Any) -> Any:
        """A ``PackCache`` on this process's device: ``dataset`` there, members built from
        the config, the model's runtime hyper-parameters left out of structures, and every
        batch padded to the search's largest where a program is compiled."""
        from packexp.models import runtime_hparams
        from packexp.packing import Member
        from packexp.packing.cache import PackCache
        from packexp.packing.data import device_data

        cfg, build_model = self.cfg, self.build_model
        data = device_data(dataset, head=self.head)

        def make_member(trial: Trial) -> Member:
            return Member.create(trial, build_model, dataset.input_shape, dataset.num_classes,
                                 data.train_size, preprocessing_for(cfg.preprocess, trial))

        return PackCache(make_member, data,
                         {**pack_settings(cfg.pack), "batch_bucket": batch_bucket(self.space)},
                         keep=reuse_setting(cfg.pack), model_runtime=runtime_hparams(build_model),
                         template=self.space.first)

    def executor(self, run_dir: Path) -> Any:
        return instantiate(self.cfg.executor, "executor")(cfg=self.worker_cfg(),
                                                            run_dir=run_dir,
                                                            trainer=self.trainer)

    def worker_cfg(self) -> DictConfig:
        """The config workers build their own data from: ``dataset.cache=auto`` pinned to
        what it chose here, so that every worker reads the data as this process does (a
        worker with less memory free would otherwise stream what this one holds)."""
        if self.cfg.dataset.get("cache") != "auto":
            return self.cfg
        cfg = self.cfg.copy()
        with open_dict(cfg):
            cfg.dataset.cache = "none" if getattr(self.dataset, "streams", False) else "memory"
        return cfg

    def listeners(self, run_dir: Path) -> list[Listener]:
        """The listeners ``cfg.listeners`` names, each given ``run_dir``, in name order."""
        node = self.cfg.get("listeners") or {}
        return [instantiate(node[name], f"listeners.{name}", run_dir=run_dir)
                for name in sorted(node) if node[name] is not None]

    def measured_facts(self, executor: Any) -> Any:
        """The ``telemetry.DeviceFacts`` of where ``executor`` trains packs."""
        return executor.on_device(facts_here)

    def measure_device(self, cache: Any, executor: Any, facts: Any,
                       run_dir: Path) -> DeviceReport:
        """The device's capacity for one pack, measured where ``executor`` trains packs
        (estimated; probed where it matters, or read from probes kept before), and the
        strategy readied for the device ``facts`` names (``WeighsCosts.prepare``: a
        calibration, for one that weighs costs); ``cache`` is this process's."""
        probes = ProbeFiles(run_dir, kept_directory(self.run.probe_dir),
                            self.calibration_facts(facts))
        capacity, source, probes.seconds = device_capacity(
            self.cfg.device, self.max_members, cache.make_member, executor.on_device, probes)
        mark("capacity")
        started = time.perf_counter()
        if isinstance(self.strategy, WeighsCosts):
            self.strategy.prepare(self.device(run_dir, facts, executor.on_device, capacity,
                                              cache.data.train_size, executor.place()))
        seconds = time.perf_counter() - started  # within the phase the mark ends
        mark("calibration")
        return DeviceReport(capacity, source, probes.seconds, probes.summary, seconds)

    def device(self, run_dir: Path, facts: Any, on_device: Callable[..., Any],
               capacity: Capacity, train_size: int,
               place: Mapping[str, Any] | None = None) -> Device:
        """Where packs train, as a strategy prepares for it: the facts a calibration there
        depends on (``facts``: its ``telemetry.DeviceFacts``; ``place``: the executor's
        ``Executor.place()``) and how to measure one there (``on_device``:
        ``Executor.on_device``, or a function of this process's cache)."""
        from packexp.packing.calibrate import calibrate_here, calibration_args

        def measure() -> dict:  # only a strategy that calibrates asks: the fits cost probes
            batch_sizes = list(self.space.params["batch_size"])
            args = calibration_args(self.space.first, batch_sizes, capacity, self.max_members,
                                    steps_for(self.scheduler.R, min(batch_sizes), train_size))
            return on_device(calibrate_here, *args)

        return Device(run_dir, facts=lambda: self.calibration_facts(facts, place),
                      measure=measure)

    def calibration_facts(self, device: Any, place: Mapping[str, Any] | None = None) -> dict:
        """What a calibration depends on: the device, the model and its member structure
        (the space's first configuration but its runtime hyper-parameters), the data's
        shape, the batch bucket and the pack settings, and where packs train when that is
        not this process (``place``: a Ray worker's CPUs and GPU share, and how many share
        the machine, change a pack's speed on the same device). Not R, the seed or the
        space's other values: every search of the architecture on the device reuses it. A
        search over stand-ins (``surrogate.scale``) keeps its own, of the stand-in."""
        import tensorflow as tf

        from packexp.models import runtime_hparams
        from packexp.packing.calibrate import VERSION
        from packexp.space.options import member_key

        cfg, dataset = self.cfg, self.dataset
        first = Trial("first", self.space.first, ())
        return {
            "version": VERSION,
            # The device packs train on: a Ray worker sees its own GPU, a local run them all.
            "device": {"cpu": device.cpu, "onednn": device.onednn,
                       "gpu": device.gpus[0] if device.gpus else None},
            "tensorflow": tf.__version__,
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "dataset": {"name": dataset.name, "input_shape": list(dataset.input_shape),
                        "val_size": dataset.val_size},
            "structure": dict(member_key(first, model=runtime_hparams(self.build_model))),
            "batch_bucket": batch_bucket(self.space),
            "preprocess": OmegaConf.to_container(cfg.preprocess, resolve=True),
            "pack": {**{k: v for k, v in pack_settings(cfg.pack).items() if k != "reuse"},
                     "max_members": self.max_members},
            "threads": [cfg.device.get("intra_op_threads"), cfg.device.get("inter_op_threads")],
            # A local run's calibrations, kept before places were told apart, still hold.
            **({"place": dict(place)} if place and place.get("executor") != "local" else {}),
            # A search over stand-ins measures the stand-in: not the full model's figures.
            **({"surrogate_scale": scale} if (scale := OmegaConf.select(
                cfg, "surrogate.scale", default=1)) != 1 else {}),
        }


def named_trainer(cfg: DictConfig) -> Trainer | None:
    """The trainer the executor's config names (``executor.trainer``: ``executor=simulated``'s
    fake trainer); None where it names none, for TensorFlow's."""
    node = OmegaConf.select(cfg, "executor.trainer")
    return None if node is None else instantiate(node, "executor.trainer")


def worker_cache(cfg: DictConfig) -> Any:
    """An executor worker's ``PackCache``: the run's dataset on this process's device and
    its members built as the driver builds them, so a pack trains the same anywhere."""
    return Components.build(cfg, probe=False).cache()


def data_file(path: Any) -> str | None:
    """A dataset path in a word: a file's stem, a folder's name, a glob's folder; None for
    none."""
    if not path:
        return None
    where = Path(str(path).rstrip("/"))
    while any(c in where.name for c in "*?[") and where.name:
        where = where.parent
    return where.stem.removesuffix(".tar") or None  # cifar-10-python.tar.gz: cifar-10-python
