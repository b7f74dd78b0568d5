"""``task=tune``: a packed Hyperband search, journaled, tracked and summarised."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from packexp.config import (
    batch_bucket,
    check_pairing,
    check_preprocessing,
    check_search,
    component_name,
    instantiate,
    member_cap,
    pack_settings,
    preprocessing_for,
    probe_model,
    reuse_setting,
)
from packexp.device import apply_threads, device_capacity, facts_here
from packexp.files import write_json
from packexp.models import runtime_hparams
from packexp.plots import write_plots
from packexp.report import print_summary
from packexp.results import PHASES, prediction_error, speedup_metrics
from packexp.search_space import Trial
from packexp.tasks.calibration import calibrate_here, calibration_args, use_calibration
from packexp.tasks.plan import plan_dict
from packexp.tasks.session import command_started, earlier_sessions_s, open_journal, tracked

log = logging.getLogger(__name__)


def tune(cfg: DictConfig, run_dir: Path) -> float:
    """Packed Hyperband over ``cfg.search_space``; writes ``results.json`` on success.

    With ``resume=true`` it continues the search journaled in ``run_dir``.

    Returns:
        The best validation accuracy found.
    """
    job_started = command_started()
    space, scheduler, strategy = check_search(cfg)
    max_members = member_cap(cfg.pack.max_members)
    dataset = instantiate(cfg.dataset, "dataset")
    build_model = instantiate(cfg.model, "model")
    check_pairing(cfg, build_model, dataset)
    apply_threads(cfg.device)  # before TensorFlow's runtime starts (the probe below)
    probe_model(build_model, dataset, space)
    pack_settings(cfg.pack)
    check_preprocessing(cfg.preprocess, space, dataset.input_shape)
    executor = instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=run_dir)

    from packexp.packing import DeviceData
    from packexp.progress import SearchProgress
    from packexp.tuner import PackedSearch, journaled_checkpoints

    journal, records = open_journal(cfg, run_dir)
    names = {g: component_name(cfg, g) for g in ("strategy", "model", "dataset")}
    write_json(run_dir / "plan.json", plan_dict(scheduler))
    # This process's data and cache: its packs under the local executor; wherever packs
    # train, the members the memory estimate measures and the pack structures planned.
    data = DeviceData(dataset)
    cache = search_cache(cfg, build_model, dataset, data, space)
    with closing(executor.start(cache)):
        facts = executor.on_device(facts_here)  # the device packs train on
        log.info("device: %s", facts)
        with tracked(cfg, run_dir, dataset=dataset, journal=journal, records=records,
                     run_name=f"{names['strategy']}-{names['model']}-{names['dataset']}"
                              f"-seed{cfg.seed}",
                     tags={**names, "task": "tune", **facts.tags()}) as tracker:
            capacity, capacity_source, probe_seconds = device_capacity(
                cfg.device, max_members, cache.make_member, executor.on_device,
                run_dir / "memory_probes.json")
            calibration_started = time.perf_counter()
            if strategy.needs_costs:
                use_calibration(cfg, strategy, scheduler, space, dataset, max_members,
                                run_dir, facts, measure=lambda: executor.on_device(
                                    calibrate_here, *calibration_args(
                                        scheduler, space, capacity, max_members,
                                        data.train_size)))
            calibration_s = time.perf_counter() - calibration_started
            with SearchProgress(scheduler) as progress:
                search = PackedSearch(
                    space=space, strategy=strategy, capacity=capacity, cache=cache,
                    tracker=tracker, journal=journal,
                    checkpoints=run_dir / "checkpoints", seed=cfg.seed, tags=names,
                    continue_on_promotion=scheduler.continue_on_promotion,
                    lr_horizon=scheduler.horizon_epochs, capacity_source=capacity_source,
                    progress=progress,
                    probe_seconds=probe_seconds, train_size=data.train_size,
                    brackets=scheduler.brackets(), executor=executor,
                )
                if records:
                    log.info("resuming: %d member results from %s", search.replay(records),
                             journal.path)
                    executor.discard(journaled_checkpoints(records))
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
                       "programs": sum(p.get("programs", 0) for p in search.packs),
                       "eval_programs": sum(p.get("eval_programs", 0) for p in search.packs),
                       "reused_members": sum(p.get("reused_members", 0) for p in search.packs),
                       "calibration_s": round(calibration_s, 3),
                       "prediction_error": prediction_error(search.packs),
                       "R": scheduler.R, "eta": scheduler.eta,
                       "continue_on_promotion": scheduler.continue_on_promotion,
                       "lr_horizon": scheduler.lr_horizon,
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
    print_summary(results, run_dir, tracker.location, cfg.get("summary_top_k", 5))
    return float(best)


def member_factory(cfg: DictConfig, build_model: Any, dataset: Any,
                   data: Any) -> Callable[[Trial], Any]:
    """Builds a trial's ``packing.Member`` (in its seeded starting state) on ``data``."""
    from packexp.packing import Member

    def make_member(trial: Trial) -> Member:
        return Member.create(trial, build_model, dataset.input_shape, dataset.num_classes,
                             data.train_size, preprocessing_for(cfg.preprocess, trial))

    return make_member


def worker_cache(cfg: DictConfig) -> Any:
    """An executor worker's ``PackCache``: the run's dataset on this process's device and
    its members built as the driver builds them, so a pack trains the same anywhere."""
    from packexp.packing import DeviceData

    dataset = instantiate(cfg.dataset, "dataset")
    build_model = instantiate(cfg.model, "model")
    apply_threads(cfg.device)
    data = DeviceData(dataset)
    return search_cache(cfg, build_model, dataset, data, check_search(cfg)[0])


def search_cache(cfg: DictConfig, build_model: Any, dataset: Any, data: Any, space: Any) -> Any:
    """The ``PackCache`` of a search: its members built from ``cfg``, the model's runtime
    hyper-parameters left out of structures, and every batch padded to the search's largest
    where a program is compiled (``Pack``'s ``batch_bucket``)."""
    from packexp.packing.cache import PackCache

    return PackCache(member_factory(cfg, build_model, dataset, data), data,
                     {**pack_settings(cfg.pack), "batch_bucket": batch_bucket(space)},
                     keep=reuse_setting(cfg.pack), model_runtime=runtime_hparams(build_model),
                     template=space.first)
