"""``task=plan``: the bracket table and each bracket's first-rung packs; trains nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from packexp.config import check_search, component_name, instantiate
from packexp.device import planning_capacity
from packexp.files import write_json
from packexp.hyperband import Hyperband, steps_for
from packexp.report import print_plan
from packexp.strategies import RungContext
from packexp.tasks.calibration import use_calibration
from packexp.telemetry import device_facts


def plan_dict(scheduler: Hyperband) -> dict:
    brackets = scheduler.brackets()
    return {"R": scheduler.R, "eta": scheduler.eta, "brackets": [
        {"s": b.s, "rungs": [{"n": r.n, "r": r.r} for r in b.rungs],
         "epochs_continued": scheduler.epochs(b, True),
         "epochs_from_scratch": scheduler.epochs(b, False)}
        for b in brackets]}



def measure_here(cfg: DictConfig, space: Any, scheduler: Hyperband, dataset: Any,
                 capacity: Any) -> dict:
    """A calibration measured in this process, for a plan that finds none kept."""
    from packexp.device import apply_threads
    from packexp.packing import DeviceData
    from packexp.tasks.calibration import calibrate_here, calibration_args
    from packexp.tasks.tune import search_cache

    build_model = instantiate(cfg.model, "model")
    apply_threads(cfg.device)
    data = DeviceData(dataset)
    cache = search_cache(cfg, build_model, dataset, data, space)
    return calibrate_here(cache, *calibration_args(scheduler, space, capacity,
                                                   capacity.max_members, data.train_size))


def plan(cfg: DictConfig, run_dir: Path) -> float:
    """Prints and writes the bracket table and each bracket's first-rung packs; trains nothing.

    Returns:
        The epochs the whole search trains, under the configured continuation.
    """
    space, scheduler, strategy = check_search(cfg)
    payload = plan_dict(scheduler)
    dataset = instantiate(cfg.dataset, "dataset")
    capacity, source = planning_capacity(cfg, space, dataset)
    if strategy.needs_costs:  # a kept calibration, or one measured here (seconds)
        use_calibration(cfg, strategy, scheduler, space, dataset, capacity.max_members,
                        run_dir, device_facts(),
                        measure=lambda: measure_here(cfg, space, scheduler, dataset, capacity))
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
    print_plan(payload, run_dir / "plan.json")
    key = "epochs_continued" if scheduler.continue_on_promotion else "epochs_from_scratch"
    return float(sum(b[key] for b in payload["brackets"]))
