"""The runner: composes the configured parts and runs the chosen task."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf

from packexp.errors import ConfigError
from packexp.hyperband import Bracket, Hyperband
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, Strategy

log = logging.getLogger(__name__)

REQUIRED_HPARAMS = ("batch_size", "optimizer", "learning_rate")


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float:
    """Runs ``cfg.task``.

    Args:
        cfg: The composed config.
        run_dir: Where outputs go; Hydra's run directory when None.

    Returns:
        The objective: the best validation accuracy found.
    """
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed={seed!r}: must be an integer")
    task = cfg.get("task")
    if task not in TASKS:
        raise ConfigError(f"task={task!r}: must be one of {sorted(TASKS)}")
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return TASKS[task](cfg, run_dir)


def tune(cfg: DictConfig, run_dir: Path) -> float:
    """Packed Hyperband over ``cfg.search_space``; writes ``results.json`` on success."""
    space: SearchSpace = instantiate(cfg.search_space, "search_space")
    check_space(space)
    scheduler: Hyperband = instantiate(cfg.scheduler, "scheduler")
    strategy: Strategy = instantiate(cfg.strategy, "strategy")
    max_members = member_cap(cfg.pack.max_members)
    dataset = instantiate(cfg.dataset, "dataset")
    build_model = instantiate(cfg.model, "model")
    probe_model(build_model, dataset, space)
    pack_options = pack_settings(cfg.pack)
    check_preprocessing(cfg.preprocess, space, dataset.input_shape)
    tracker = instantiate(cfg.tracking, "tracking")
    names = {g: component_name(cfg, g) for g in ("strategy", "model", "dataset")}
    write_json(run_dir / "plan.json", plan_dict(scheduler))

    tracker.start(
        run_name=f"{names['strategy']}-{names['model']}-{names['dataset']}-seed{cfg.seed}",
        params=flatten(OmegaConf.to_container(cfg, resolve=True)),
        tags={**names, "task": "tune"},
    )
    status = "FAILED"
    try:
        from packexp.packing import DeviceData, Member

        data = DeviceData(dataset)

        def make_member(trial: Trial) -> Member:
            return Member.create(trial, build_model, dataset.input_shape, dataset.num_classes,
                                 data.train_size, preprocessing_for(cfg.preprocess, trial))

        capacity, capacity_source = device_capacity(cfg.device, max_members, make_member, data,
                                                    pack_options)
        search = PackedSearch(
            space=space, strategy=strategy, capacity=capacity, make_member=make_member,
            data=data, pack_options=pack_options, tracker=tracker, seed=cfg.seed, tags=names,
            capacity_source=capacity_source,
        )
        started = time.perf_counter()
        scheduler.run(search.sample, search.train_rung)
        search.finish()
        wall = time.perf_counter() - started
        results = {**names, "seed": cfg.seed, "wall_time_s": round(wall, 3),
                   "R": scheduler.R, "eta": scheduler.eta,
                   "capacity": {"bytes": capacity.limit, "max_members": max_members},
                   "trials": list(search.trials.values()), "packs": search.packs,
                   "best": search.best()}
        best = results["best"]["val_accuracy"] if results["best"] else math.nan
        tracker.log_metrics({"wall_time_s": wall, "best_val_accuracy": best})
        write_json(run_dir / "results.json", results)
        tracker.log_artifact(run_dir / "results.json")
        tracker.log_artifact(run_dir / "plan.json")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.end(status)
    print_summary(results, run_dir, tracker.location, cfg.get("summary_top_k", 5))
    return float(best)


@dataclass
class PackedSearch:
    """Hyperband's callbacks: sample a bracket, and train and score one rung in packs."""

    space: SearchSpace
    strategy: Strategy
    capacity: Capacity
    make_member: Callable[[Trial], Any]
    data: Any
    pack_options: Mapping[str, Any]
    tracker: Any
    seed: int
    tags: Mapping[str, str]
    capacity_source: str = "capacity"
    trials: dict[str, dict] = field(default_factory=dict)
    packs: list[dict] = field(default_factory=list)
    _last: dict[int, list[str]] = field(default_factory=dict)

    def sample(self, bracket: Bracket) -> list[Trial]:
        trials = self.space.sample(bracket.rungs[0].n, self.seed, bracket.s)
        if len(trials) < bracket.rungs[0].n:
            log.warning("bracket %d wants %d configurations; the space has only %d",
                        bracket.s, bracket.rungs[0].n, len(trials))
        for t in trials:
            self.trials[t.trial_id] = {"trial_id": t.trial_id, "hparams": dict(t.hparams),
                                       "bracket": bracket.s, "status": "running",
                                       "rungs": [], "packs": []}
        return trials

    def train_rung(
        self, bracket: Bracket, rung: int, trials: list[Trial], epochs: float
    ) -> dict[str, float | None]:
        from packexp.packing.trainer import train_group

        ids = [t.trial_id for t in trials]
        for dropped in set(self._last.get(bracket.s, [])) - set(ids):
            self._retire(dropped, "killed")
        self._last[bracket.s] = ids
        check_fits(trials, self.capacity, self.capacity_source)
        groups = self.strategy.pack(trials, self.capacity)
        check_partition(trials, groups, self.capacity)
        log.info("bracket %d rung %d: %d trials to %.3g epochs in %d packs",
                 bracket.s, rung, len(trials), epochs, len(groups))
        scores: dict[str, float | None] = {}
        for j, group in enumerate(groups):
            runs = train_group(group, self.make_member, self.data, epochs, self.pack_options)
            for k, pack_run in enumerate(runs):
                pack_id = f"b{bracket.s}-r{rung}-p{j:02d}" + (f"-{k}" if len(runs) > 1 else "")
                scores.update(self._record(bracket, rung, epochs, pack_id, pack_run))
        if rung == len(bracket.rungs) - 1:
            for trial_id in ids:
                if self.trials[trial_id]["status"] == "running":
                    self._retire(trial_id, "finished")
        return scores

    def _record(self, bracket: Bracket, rung: int, epochs: float, pack_id: str,
                pack_run: Any) -> dict[str, float | None]:
        stats, members = pack_run.stats, pack_run.members
        self.packs.append({
            "pack_id": pack_id, "bracket": bracket.s, "rung": rung, "epochs": epochs,
            "members": [m.trial_id for m in members], "steps": stats.steps,
            "build_s": round(stats.build_s, 4), "switches": stats.switches,
            "switch_overhead_s": round(stats.switch_overhead_s, 4),
            "train_s": round(stats.train_s, 4), "step_time_ms": stats.step_time_ms,
            "peak_memory_mb": round(pack_run.peak_memory_bytes / 2**20, 2),
            "planned_cost_mb": round(sum(self.capacity.cost(m.trial) for m in members) / 2**20,
                                     2),
            "splits": pack_run.splits,
        })
        scores: dict[str, float | None] = {}
        for m in members:
            ev = pack_run.evaluation[m.trial_id]
            scores[m.trial_id] = ev.val_accuracy
            record = self.trials[m.trial_id]
            train_loss = m.train_loss if m.train_loss is not None and math.isfinite(
                m.train_loss) else None
            record["rungs"].append({
                "rung": rung, "epochs": epochs, "steps": m.step,
                "val_accuracy": ev.val_accuracy, "val_loss": ev.val_loss,
                "train_loss": train_loss, "pack_id": pack_id,
            })
            record["packs"].append(pack_id)
            self.tracker.log_trial_rung(
                m.trial_id, m.trial.hparams,
                {**self.tags, "bracket": bracket.s, "rung": rung, "pack_id": pack_id},
                epochs,
                {"val_accuracy": ev.val_accuracy, "val_loss": ev.val_loss,
                 "train_loss": train_loss, "step_time_ms": stats.step_time_ms,
                 "pack_members": len(members)},
            )
            if m.failed:
                self._retire(m.trial_id, "failed")
        return scores

    def finish(self) -> None:
        for trial_id, record in self.trials.items():
            if record["status"] == "running":
                self._retire(trial_id, "killed")

    def best(self) -> dict | None:
        """The trial and rung with the highest validation accuracy seen."""
        scored = [(r["val_accuracy"], r["epochs"], t) for t in self.trials.values()
                  for r in t["rungs"] if r["val_accuracy"] is not None]
        if not scored:
            return None
        acc, epochs, trial = max(scored, key=lambda s: (s[0], s[1]))
        return {"trial_id": trial["trial_id"], "hparams": trial["hparams"],
                "val_accuracy": acc, "epochs": epochs}

    def _retire(self, trial_id: str, status: str) -> None:
        record = self.trials[trial_id]
        if record["status"] != "running":
            return
        record["status"] = status
        self.tracker.end_trial(trial_id, {"killed": "KILLED", "failed": "FAILED",
                                          "finished": "FINISHED"}[status])


def instantiate(node: DictConfig, group: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` whose errors become one line naming the config group."""
    if node is None or "_target_" not in node:
        raise ConfigError(f"{group}: no _target_; choose a file from conf/{group}/")
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__ or e
        if isinstance(cause, ConfigError):
            raise cause from None
        message = str(cause)
        if isinstance(cause, ValueError) and "=" in message.split(":")[0]:
            raise ConfigError(f"{group}.{message}") from None
        raise ConfigError(f"{group}: {type(cause).__name__}: {message}") from None


def check_space(space: SearchSpace) -> None:
    from packexp.packing.optimizers import NAMES

    missing = [k for k in REQUIRED_HPARAMS if k not in space.params]
    if missing:
        raise ConfigError(f"search_space.params: missing {missing}; training needs each of "
                          f"{list(REQUIRED_HPARAMS)}")
    for b in space.params["batch_size"]:
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ConfigError(f"search_space.params.batch_size: {b!r} is not a positive integer")
    for o in space.params["optimizer"]:
        if o not in NAMES:
            raise ConfigError(f"search_space.params.optimizer: {o!r} is not one of {list(NAMES)}")
    for lr in space.params["learning_rate"]:
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
            raise ConfigError(f"search_space.params.learning_rate: {lr!r} is not a positive number")


def probe_model(build_model: Callable, dataset: Any, space: SearchSpace) -> None:
    """Builds the model once per activation so a bad value fails before any training."""
    first = next(iter(space))
    for activation in space.params.get("activation", (None,)):
        hparams = {**first, "activation": activation} if activation else first
        try:
            build_model(dataset.input_shape, dataset.num_classes, hparams)
        except ValueError as e:
            raise ConfigError(f"model: cannot build for {dataset.name} "
                              f"{list(dataset.input_shape)}: {e}") from None


def member_cap(max_members: Any) -> int:
    if isinstance(max_members, bool) or not isinstance(max_members, int) or max_members < 1:
        raise ConfigError(f"pack.max_members={max_members!r}: must be an integer >= 1")
    return max_members


def pack_settings(pack: DictConfig) -> dict[str, Any]:
    """``Pack`` keyword arguments from ``cfg.pack``, checked."""
    if pack.misaligned not in ("mask", "switch"):
        raise ConfigError(f"pack.misaligned={pack.misaligned!r}: must be mask or switch")
    for key in ("chunk_steps", "eval_batch_size"):
        value = pack[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"pack.{key}={value!r}: must be an integer >= 1")
    if not isinstance(pack.jit_compile, bool):
        raise ConfigError(f"pack.jit_compile={pack.jit_compile!r}: must be true or false")
    if pack.data_sharing not in ("gather", "slice"):
        raise ConfigError(f"pack.data_sharing={pack.data_sharing!r}: must be gather or slice")
    return {"misaligned": pack.misaligned, "data_sharing": pack.data_sharing,
            "jit_compile": pack.jit_compile,
            "chunk_steps": pack.chunk_steps, "eval_batch_size": pack.eval_batch_size}


PREPROCESS_KEYS = ("mean", "std", "crop_padding", "flip")


def preprocessing_for(preprocess: DictConfig, trial: Trial | None = None) -> Any:
    """The trial's ``Preprocessing``: ``cfg.preprocess``, overridden by same-named hparams."""
    from packexp.packing.data import Preprocessing

    values = {k: preprocess.get(k) for k in PREPROCESS_KEYS}
    if trial is not None:
        values.update({k: v for k, v in trial.hparams.items() if k in PREPROCESS_KEYS})
    for key in ("mean", "std"):
        if values[key] is not None:
            values[key] = tuple(float(v) for v in values[key])
    return Preprocessing(mean=values["mean"], std=values["std"],
                         crop_padding=int(values["crop_padding"] or 0),
                         flip=bool(values["flip"]))


def check_preprocessing(preprocess: DictConfig, space: SearchSpace,
                        input_shape: tuple[int, ...]) -> None:
    """Every preprocessing the search can produce must apply to the data."""
    variants = [{}] + [{k: v} for k in PREPROCESS_KEYS if k in space.params
                       for v in space.params[k]]
    for variant in variants:
        trial = Trial("check", variant, ())
        try:
            preprocessing_for(preprocess, trial).check(input_shape)
        except (TypeError, ValueError) as e:
            where = "search_space.params" if variant else "preprocess"
            raise ConfigError(f"{where}.{e}") from None


def device_capacity(device: DictConfig, max_members: int, make_member: Callable,
                    data: Any, pack_options: Mapping[str, Any]) -> tuple[Capacity, str]:
    """Memory capacity of one pack, with member costs from the estimate and its probes."""
    from packexp.packing.memory import MemoryModel, device_capacity_bytes
    from packexp.packing.trainer import probe_member

    try:
        limit, source = device_capacity_bytes(device.memory_budget_mb,
                                              device.gpu_memory_fraction)
    except ValueError as e:
        raise ConfigError(f"device.{e}") from None

    warmed: list[bool] = []

    def probe(trial: Trial) -> int:
        if not warmed:  # the first pack in a process pays TensorFlow's one-off set-up costs
            probe_member(trial, make_member, data, pack_options)
            warmed.append(True)
        return probe_member(trial, make_member, data, pack_options)

    memory = MemoryModel(lambda t: make_member(t).model, probe if device.probe else None)
    return Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source


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


def component_name(cfg: DictConfig, group: str) -> str:
    """The config file chosen for ``group``; its module name outside a Hydra app."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.choices[group])
    except (ValueError, KeyError):
        return str(cfg[group]["_target_"]).rsplit(".", 2)[-2]


def plan_dict(scheduler: Hyperband) -> dict:
    return {"R": scheduler.R, "eta": scheduler.eta, "brackets": [
        {"s": b.s, "rungs": [{"n": r.n, "r": r.r} for r in b.rungs]}
        for b in scheduler.brackets()]}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config to dotted keys: ``{"model": {"width": 64}}`` -> ``{"model.width": 64}``."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def write_json(path: Path, payload: Any) -> None:
    """Writes atomically: a reader sees the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def print_summary(results: dict, run_dir: Path, store: str | None, top_k: int) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = sorted(
        ((r["val_accuracy"], r["epochs"], t) for t in results["trials"] for r in t["rungs"][-1:]
         if r["val_accuracy"] is not None),
        key=lambda row: (-row[0], -row[1]))[:top_k]
    table = Table(title=f"Best configurations ({results['strategy']} packing, "
                        f"{results['model']} on {results['dataset']}, seed {results['seed']})")
    names = list(results["trials"][0]["hparams"]) if results["trials"] else []
    for column in ["trial", *names, "epochs", "val_accuracy"]:
        table.add_column(column, justify="right" if column != "trial" else "left")
    for acc, epochs, trial in rows:
        table.add_row(trial["trial_id"], *(str(trial["hparams"][n]) for n in names),
                      f"{epochs:g}", f"{acc:.4f}")
    console = Console()
    if not console.is_terminal:
        console.width = 160
    console.print(table)
    console.print(f"wall time {results['wall_time_s']:.1f} s, {len(results['trials'])} trials, "
                  f"{len(results['packs'])} packs")
    console.print(f"run directory: {run_dir.resolve()}")
    if store:
        console.print(f"MLflow store: {store}  (open with: mlflow ui --backend-store-uri {store})")


TASKS: dict[str, Callable[[DictConfig, Path], float]] = {"tune": tune}
