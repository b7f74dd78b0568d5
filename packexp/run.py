"""The runner: composes the configured parts and runs the chosen task."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf

from packexp.errors import ConfigError
from packexp.hyperband import Hyperband, steps_for
from packexp.journal import Journal, JournalError, first_difference
from packexp.plots import write_plots
from packexp.search_space import SearchSpace, Trial
from packexp.strategies import Capacity, RungContext, Strategy
from packexp.telemetry import device_facts
from packexp.tracking import hydra_tags, speedup_metrics

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
    fit_dataset_to_model(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    return TASKS[task](cfg, run_dir)


def fit_dataset_to_model(cfg: DictConfig) -> None:
    """Resolves ``dataset.images: auto``: images for a model that needs them, else features.

    It changes ``cfg`` itself, before anything reads it, so the journal, the MLflow params
    and profile workers all see the value the run used.
    """
    dataset = cfg.get("dataset")
    if dataset is None or dataset.get("images") != "auto":
        return
    from packexp.models import needs_images

    dataset.images = needs_images(instantiate(cfg.model, "model"))


def dataset_source(cfg: DictConfig) -> str | None:
    """The file or folder the dataset is read from (``dataset.path``); None for data in code."""
    path = cfg.dataset.get("path")
    return os.path.abspath(os.path.expanduser(str(path))) if path else None


def check_pairing(cfg: DictConfig, build_model: Callable, dataset: Any) -> None:
    """A model that takes only images, on a dataset of feature vectors, stops with one line."""
    from packexp.models import needs_images

    shape = list(dataset.input_shape)
    if len(shape) == 3 or not needs_images(build_model):
        return
    # Name the dataset key that made features, where the dataset has one.
    key = next((k for k in ("images", "shape") if k in cfg.dataset), None)
    where = (f"dataset.{key}={json.dumps(OmegaConf.to_container(cfg.dataset)[key])}" if key
             else "dataset")
    remedy = {"images": "use dataset.images=auto (the default) or true",
              "shape": "give dataset.shape=[height, width, channels]"}.get(
        key, "choose a dataset with images")
    raise ConfigError(f"{where}: model {component_name(cfg, 'model')} needs images [height, "
                      f"width, channels], and dataset {dataset.name} gives feature vectors "
                      f"{shape}; {remedy}")


def tune(cfg: DictConfig, run_dir: Path) -> float:
    """Packed Hyperband over ``cfg.search_space``; writes ``results.json`` on success.

    With ``resume=true`` it continues the search journaled in ``run_dir``.
    """
    job_started = command_started()
    space: SearchSpace = instantiate(cfg.search_space, "search_space")
    check_space(space)
    scheduler: Hyperband = instantiate(cfg.scheduler, "scheduler")
    strategy: Strategy = instantiate(cfg.strategy, "strategy")
    max_members = member_cap(cfg.pack.max_members)
    dataset = instantiate(cfg.dataset, "dataset")
    build_model = instantiate(cfg.model, "model")
    check_pairing(cfg, build_model, dataset)
    probe_model(build_model, dataset, space)
    pack_options = pack_settings(cfg.pack)
    check_preprocessing(cfg.preprocess, space, dataset.input_shape)
    journal, records = open_journal(cfg, run_dir)
    tracker = instantiate(cfg.tracking, "tracking")
    names = {g: component_name(cfg, g) for g in ("strategy", "model", "dataset")}
    write_json(run_dir / "plan.json", plan_dict(scheduler))
    facts = device_facts()
    log.info("device: %s", facts)

    tracker.start(
        run_name=f"{names['strategy']}-{names['model']}-{names['dataset']}-seed{cfg.seed}",
        params=flatten(OmegaConf.to_container(cfg, resolve=True)),
        tags={**names, "task": "tune", **facts.tags(), **hydra_tags()},
        resume_run_id=next((r["run_id"] for r in records if r["event"] == "tracking"), None),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        dataset=dataset, dataset_source=dataset_source(cfg),
    )
    tracker.log_artifact(run_dir / ".hydra", "hydra")
    if not records and tracker.run_id:
        journal.append("tracking", run_id=tracker.run_id)
    status = "FAILED"
    try:
        from packexp.packing import DeviceData, Member
        from packexp.packing.cache import PackCache
        from packexp.progress import SearchProgress
        from packexp.tuner import PackedSearch

        data = DeviceData(dataset)

        def make_member(trial: Trial) -> Member:
            return Member.create(trial, build_model, dataset.input_shape, dataset.num_classes,
                                 data.train_size, preprocessing_for(cfg.preprocess, trial))

        capacity, capacity_source, probe_seconds = device_capacity(
            cfg.device, max_members, make_member, data, pack_options,
            run_dir / "memory_probes.json")
        cache = PackCache(make_member, data, pack_options, keep=reuse_setting(cfg.pack))
        calibration_started = time.perf_counter()
        if strategy.needs_costs:
            use_calibration(cfg, strategy, space, dataset, capacity, max_members, run_dir,
                            measure=lambda: calibrate_device(cfg, cache, space, capacity,
                                                             max_members, data.train_size))
        calibration_s = time.perf_counter() - calibration_started
        with SearchProgress(scheduler) as progress:
            search = PackedSearch(
                space=space, strategy=strategy, capacity=capacity, cache=cache,
                tracker=tracker, journal=journal,
                checkpoints=run_dir / "checkpoints", seed=cfg.seed, tags=names,
                continue_on_promotion=scheduler.continue_on_promotion,
                capacity_source=capacity_source, progress=progress,
                probe_seconds=probe_seconds, train_size=data.train_size,
                brackets=scheduler.brackets(),
            )
            if records:
                log.info("resuming: %d member results from %s", search.replay(records),
                         journal.path)
            started = time.perf_counter() - calibration_s
            scheduler.run(search.sample, search.train_rung)
            search.finish()
        wall = time.perf_counter() - started + earlier_sessions_s(records)
        phases = {k: round(sum(p.get(k, 0.0) for p in search.packs), 4) for k in PHASES}
        startup = (None if search.first_pack_at is None
                   else round(search.first_pack_at - job_started, 3))
        results = {**names, "seed": cfg.seed, "wall_time_s": round(wall, 3),
                   "startup_s": startup, "phases": phases,
                   "train_share": round(phases["train_s"] / wall, 4) if wall > 0 else None,
                   "reused_packs": sum(bool(p.get("reused")) for p in search.packs),
                   "reused_members": sum(p.get("reused_members", 0) for p in search.packs),
                   "calibration_s": round(calibration_s, 3),
                   "prediction_error": prediction_error(search.packs),
                   "R": scheduler.R, "eta": scheduler.eta,
                   "continue_on_promotion": scheduler.continue_on_promotion,
                   "resumed": bool(records),
                   "capacity": {"bytes": capacity.limit, "max_members": max_members},
                   "trials": list(search.trials.values()), "packs": search.packs,
                   "best": search.best()}
        best = results["best"]["val_accuracy"] if results["best"] else math.nan
        tracker.log_metrics({"wall_time_s": wall, "best_val_accuracy": best,
                             "startup_s": startup, "train_share": results["train_share"],
                             "calibration_s": calibration_s,
                             "prediction_error_median": results["prediction_error"],
                             **{f"total_{k}": v for k, v in phases.items()},
                             **speedup_metrics(results)})
        write_json(run_dir / "results.json", results)
        journal.append("finished", wall_time_s=wall)
        tracker.log_artifact(run_dir / "results.json")
        tracker.log_artifact(run_dir / "plan.json")
        for picture in write_plots(results, run_dir):
            tracker.log_artifact(picture, "plots")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.log_artifact(run_dir / "packexp.log")
        tracker.end(status)
    print_summary(results, run_dir, tracker.location, cfg.get("summary_top_k", 5))
    return float(best)


def calibration_facts(cfg: DictConfig, space: SearchSpace, dataset: Any,
                      max_members: int) -> dict:
    """What a calibration depends on: device, model, data shape, structure, pack settings."""
    import tensorflow as tf

    first = next(iter(space))
    scheduler: Hyperband = instantiate(cfg.scheduler, "scheduler")
    train_size = len(dataset.x_train)
    return {
        "device": device_facts().tags(), "tensorflow": tf.__version__,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "dataset": {"name": dataset.name, "input_shape": list(dataset.input_shape),
                    "val_size": len(dataset.x_val)},
        "structure": {k: v for k, v in first.items() if k != "batch_size"},
        "batch_sizes": sorted(space.params["batch_size"]),
        "preprocess": OmegaConf.to_container(cfg.preprocess, resolve=True),
        "pack": {**pack_settings(cfg.pack), "max_members": max_members},
        "longest_steps": steps_for(scheduler.R, min(space.params["batch_size"]), train_size),
    }


def use_calibration(cfg: DictConfig, strategy: Strategy, space: SearchSpace, dataset: Any,
                    capacity: Capacity, max_members: int, run_dir: Path,
                    measure: Callable[[], dict] | None) -> None:
    """Gives a cost-weighing strategy its calibration: kept, or measured with ``measure``."""
    from packexp.packing.calibrate import calibration_key, load_or_calibrate

    facts = calibration_facts(cfg, space, dataset, max_members)
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


def calibrate_device(cfg: DictConfig, cache: Any, space: SearchSpace, capacity: Capacity,
                     max_members: int, train_size: int) -> dict:
    from packexp.packing.calibrate import calibrate

    scheduler: Hyperband = instantiate(cfg.scheduler, "scheduler")
    batch_sizes = space.params["batch_size"]
    log.info("cost model: calibrating on this device")
    return calibrate(cache, next(iter(space)), batch_sizes, max_members, capacity.fits,
                     steps_for(scheduler.R, min(batch_sizes), train_size))


def prediction_error(packs: list[dict]) -> float | None:
    """Median relative error of the packs' ``predicted_s`` against their ``duration_s``."""
    import statistics

    errors = [abs(p["predicted_s"] - p["duration_s"]) / p["duration_s"] for p in packs
              if p.get("predicted_s") is not None and p.get("duration_s")]
    return round(statistics.median(errors), 4) if errors else None


# Keys that may differ between a run and its resume: they change no result.
RESUME_FREE = ("resume", "summary_top_k", "tracking.")


def open_journal(cfg: DictConfig, run_dir: Path) -> tuple[Journal, list[dict]]:
    """The run's journal, and on ``resume=true`` the records of the run being resumed."""
    journal = Journal(run_dir)
    config = {k: v for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()
              if not k.startswith(RESUME_FREE)}
    if not cfg.get("resume", False):
        if journal.exists:
            raise ConfigError(f"hydra.run.dir={run_dir}: holds a journal already; add "
                              "resume=true to continue that run, or choose another directory")
        journal.append("start", config=config, overrides=task_overrides())
        return journal, []
    try:
        records = journal.read()
    except JournalError as e:
        raise ConfigError(f"resume=true: {e}") from None
    if any(r["event"] == "finished" for r in records):
        raise ConfigError(f"resume=true: the run in {run_dir} has finished already")
    differs = first_difference(records[0]["config"], config)
    if differs:
        started = " ".join(records[0].get("overrides") or []) or "no overrides"
        raise ConfigError(f"resume=true: {differs}; resume with the overrides the run started "
                          f"with ({started})")
    journal.append("resume", overrides=task_overrides())
    return journal, records


def earlier_sessions_s(records: list[dict]) -> float:
    """Search time spent by the sessions a resumed run continues (to its last finished pack)."""
    total, session = 0.0, 0.0
    for r in records:
        if r["event"] == "resume":
            total, session = total + session, 0.0
        elif r["event"] == "pack":
            session = max(session, r.get("elapsed_s", 0.0))
    return total + session


def task_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return [o for o in HydraConfig.get().overrides.task if not o.startswith("resume")]
    except ValueError:
        return []


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


# A pack's time by phase, in its record and summed over the search (see README).
PHASES = ("build_s", "trace_s", "train_s", "eval_s", "checkpoint_s", "probe_s")


_jobs_started = 0


def command_started() -> float:
    """Where this job's ``startup_s`` counts from (time.time() seconds).

    The process's start for its first job, so Python, TensorFlow and Hydra starting count;
    a later job of a multirun sweep starts afresh in the same process, at this call.
    """
    import psutil

    global _jobs_started
    _jobs_started += 1
    return psutil.Process().create_time() if _jobs_started == 1 else time.time()


def reuse_setting(pack: DictConfig) -> int:
    reuse = pack.get("reuse", 32)
    if isinstance(reuse, bool) or not isinstance(reuse, int) or reuse < 0:
        raise ConfigError(f"pack.reuse={reuse!r}: must be an integer >= 0 (packs kept for "
                          "reuse; 0 builds every pack afresh)")
    return reuse


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
    if not isinstance(pack.jit_compile, bool) and pack.jit_compile != "auto":
        raise ConfigError(f"pack.jit_compile={pack.jit_compile!r}: must be true, false or auto")
    if pack.data_sharing not in ("gather", "slice"):
        raise ConfigError(f"pack.data_sharing={pack.data_sharing!r}: must be gather or slice")
    if pack.fusion not in ("auto", "on", "off"):  # packing.fused.MODES, without TensorFlow
        raise ConfigError(f"pack.fusion={pack.fusion!r}: must be auto, on or off")
    if pack.grouped_conv not in ("auto", "native", "split"):  # packing.fused.GROUPED_CONV
        raise ConfigError(f"pack.grouped_conv={pack.grouped_conv!r}: must be auto, native or "
                          "split")
    return {"misaligned": pack.misaligned, "data_sharing": pack.data_sharing,
            "fusion": pack.fusion, "grouped_conv": pack.grouped_conv,
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


PROBE_MARGIN = 16  # the CPU probes measured up to ~15x the estimate for tiny models


def device_capacity(device: DictConfig, max_members: int, make_member: Callable,
                    data: Any, pack_options: Mapping[str, Any],
                    probes_file: Path | None = None
                    ) -> tuple[Capacity, str, Callable[[], float]]:
    """Memory capacity of one pack, with member costs from the estimate and its probes.

    With ``probes_file``, the probes are kept there (per batch size) and a resumed run reads
    them back instead of probing again.

    Returns:
        The capacity, the setting it comes from, and a clock of the probes' time so far.
    """
    from packexp.packing.memory import MemoryModel
    from packexp.packing.trainer import probe_member

    limit, source = device_limit(device)

    warmed: list[bool] = []
    spent = [0.0]

    def probe(trial: Trial) -> int:
        t0 = time.perf_counter()
        try:
            if not warmed:  # the first pack in a process pays TensorFlow's one-off set-up
                probe_member(trial, make_member, data, pack_options)
                warmed.append(True)
            return probe_member(trial, make_member, data, pack_options)
        finally:
            spent[0] += time.perf_counter() - t0

    if device.probe not in (True, False, "auto"):
        raise ConfigError(f"device.probe={device.probe!r}: must be true, false or auto")

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
                         worth_probing, known, keep)
    return (Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source,
            lambda: spent[0])


def component_name(cfg: DictConfig, group: str) -> str:
    """The config file chosen for ``group``; its module name outside a Hydra app."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.choices[group])
    except (ValueError, KeyError):
        return str(cfg[group]["_target_"]).rsplit(".", 2)[-2]


def plan_dict(scheduler: Hyperband) -> dict:
    brackets = scheduler.brackets()
    return {"R": scheduler.R, "eta": scheduler.eta, "brackets": [
        {"s": b.s, "rungs": [{"n": r.n, "r": r.r} for r in b.rungs],
         "epochs_continued": scheduler.epochs(b, True),
         "epochs_from_scratch": scheduler.epochs(b, False)}
        for b in brackets]}


def plan(cfg: DictConfig, run_dir: Path) -> float:
    """Prints and writes the bracket table and each bracket's first-rung packs; trains nothing.

    Returns:
        The epochs the whole search trains, under the configured continuation.
    """
    from rich.console import Console
    from rich.table import Table

    scheduler: Hyperband = instantiate(cfg.scheduler, "scheduler")
    space: SearchSpace = instantiate(cfg.search_space, "search_space")
    check_space(space)
    strategy: Strategy = instantiate(cfg.strategy, "strategy")
    payload = plan_dict(scheduler)
    capacity, source = planning_capacity(cfg, space)
    dataset = instantiate(cfg.dataset, "dataset")
    if strategy.needs_costs:
        use_calibration(cfg, strategy, space, dataset, capacity, capacity.max_members,
                        run_dir, measure=None)
    for bracket, record in zip(scheduler.brackets(), payload["brackets"], strict=True):
        trials = space.sample(bracket.rungs[0].n, cfg.seed, bracket.s)
        rung = RungContext(steps={t.trial_id: steps_for(bracket.rungs[0].r,
                                                        t.hparams["batch_size"],
                                                        len(dataset.x_train))
                                  for t in trials})
        packs = [group for group, _ in strategy.plan(trials, capacity, rung)]
        record["first_rung_packs"] = [[t.trial_id for t in p] for p in packs]
        record["first_rung_pack_batch_sizes"] = [
            [t.hparams["batch_size"] for t in p] for p in packs]
    payload["capacity"] = {"source": source, "bytes": capacity.limit,
                           "max_members": capacity.max_members}
    payload["strategy"] = component_name(cfg, "strategy")
    write_json(run_dir / "plan.json", payload)

    console = Console()
    if not console.is_terminal:
        console.width = 160
    table = Table(title=f"Hyperband R={scheduler.R}, eta={scheduler.eta}: "
                        f"{len(payload['brackets'])} brackets")
    for column in ("bracket s", "rung", "n", "r (epochs)", "epochs, continued",
                   "epochs, from scratch"):
        table.add_column(column, justify="right")
    for bracket, record in zip(scheduler.brackets(), payload["brackets"], strict=True):
        before = 0.0
        for i, rung in enumerate(bracket.rungs):
            table.add_row(str(bracket.s) if i == 0 else "", str(i), str(rung.n), f"{rung.r:g}",
                          f"{rung.n * (rung.r - before):g}", f"{rung.n * rung.r:g}")
            before = rung.r
        table.add_row("", "all", str(sum(r.n for r in bracket.rungs)), "",
                      f"{record['epochs_continued']:g}", f"{record['epochs_from_scratch']:g}",
                      style="bold", end_section=True)
    continued = sum(b["epochs_continued"] for b in payload["brackets"])
    scratch = sum(b["epochs_from_scratch"] for b in payload["brackets"])
    table.add_row("total", "", str(sum(b["rungs"][0]["n"] for b in payload["brackets"])),
                  "", f"{continued:g}", f"{scratch:g}", style="bold")
    console.print(table)
    evaluations = sum(r["n"] for b in payload["brackets"] for r in b["rungs"])
    console.print(f"{evaluations} evaluations in all")
    console.print(f"First-rung packs under strategy {payload['strategy']} ({source}, at most "
                  f"{capacity.max_members} members):")
    for record in payload["brackets"]:
        sizes = [len(p) for p in record["first_rung_packs"]]
        console.print(f"  bracket {record['s']}: {len(sizes)} packs of {sizes}; batch sizes "
                      f"{record['first_rung_pack_batch_sizes']}")
    console.print(f"plan written to {(run_dir / 'plan.json').resolve()}")
    return float(continued if scheduler.continue_on_promotion else scratch)


def device_limit(device: DictConfig) -> tuple[int, str]:
    """Bytes one pack may use on the device, and the setting they come from."""
    from packexp.packing.memory import device_capacity_bytes

    try:
        return device_capacity_bytes(device.memory_budget_mb, device.gpu_memory_fraction)
    except ValueError as e:
        raise ConfigError(f"device.{e}") from None


def planning_capacity(cfg: DictConfig, space: SearchSpace) -> tuple[Capacity, str]:
    """The device capacity with estimated member costs (no probe: planning trains nothing)."""
    from packexp.packing.memory import MemoryModel

    max_members = member_cap(cfg.pack.max_members)
    dataset = instantiate(cfg.dataset, "dataset")
    build_model = instantiate(cfg.model, "model")
    check_pairing(cfg, build_model, dataset)
    probe_model(build_model, dataset, space)
    limit, source = device_limit(cfg.device)
    memory = MemoryModel(lambda t: build_model(dataset.input_shape, dataset.num_classes,
                                               t.hparams))
    return Capacity(limit=float(limit), cost=memory.cost, max_members=max_members), source


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
                  f"{len(results['packs'])} packs ({results.get('reused_packs', 0)} on reused "
                  f"models and steps; {results.get('reused_members', 0)} members of other packs "
                  "on reused models)")
    phases = results.get("phases")
    if phases:
        console.print(f"training {results['train_share']:.0%} of the search; "
                      + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in phases.items())
                      + (f"; {results['startup_s']:.1f} s from the command to the first pack"
                         if results.get("startup_s") is not None else ""))
    if results.get("prediction_error") is not None:
        predicted = [p for p in results["packs"] if p.get("predicted_s") is not None]
        expected = sum(p["predicted_s"] for p in predicted)
        console.print(
            f"cost model: {len(predicted)} packs predicted {expected:.1f} s, "
            f"took {sum(p['duration_s'] for p in predicted):.1f} s; median relative error "
            f"{results['prediction_error']:.0%}"
            + (f"; {results['calibration_s']:.1f} s calibrating" if results.get("calibration_s")
               else ""))
    fused = sum(1 for p in results["packs"] if p.get("fused"))
    if fused:
        console.print(f"{fused} of {len(results['packs'])} packs were fused: their members' "
                      "scores match training alone to float32 rounding, not bit for bit "
                      "(pack.fusion=off for bit-exact plain packs)")
    console.print(f"run directory: {run_dir.resolve()}")
    if store:
        console.print(f"MLflow store: {store}  (open with: mlflow ui --backend-store-uri {store})")


def profile(cfg: DictConfig, run_dir: Path) -> float:
    """The paper's micro-benchmark ``cfg.profile`` (packexp/profile/); TensorFlow loads here."""
    from packexp.profile import run_profile

    return run_profile(cfg, run_dir)


TASKS: dict[str, Callable[[DictConfig, Path], float]] = {"tune": tune, "plan": plan,
                                                         "profile": profile}
