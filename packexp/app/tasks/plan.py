"""``task=plan``: the bracket table and each bracket's first-rung packs; trains nothing."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from packexp.config import component_name
from packexp.config.components import Components
from packexp.config.device import planning_capacity
from packexp.files import write_json
from packexp.records.report import print_plan
from packexp.schedulers import Scheduler
from packexp.space.options import steps_for
from packexp.strategies import RungContext, WeighsCosts
from packexp.telemetry import device_facts

log = logging.getLogger(__name__)


def plan_dict(scheduler: Scheduler) -> dict:
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
    parts = Components.build(cfg)
    space, scheduler, dataset = parts.space, parts.scheduler, parts.dataset
    payload = plan_dict(scheduler)
    capacity, source = planning_capacity(cfg.device, parts.build_model, dataset,
                                         parts.max_members)
    # A strategy that weighs costs reads a kept calibration, or measures one here (seconds).
    if isinstance(parts.strategy, WeighsCosts):
        parts.strategy.prepare(parts.device(run_dir, device_facts(),
                                            lambda fn, *args: fn(parts.cache(), *args),
                                            capacity, dataset.train_size))
    drawn: list[dict] = []  # as the search, no bracket draws an earlier one's configurations
    for bracket, record in zip(scheduler.brackets(), payload["brackets"], strict=True):
        trials = scheduler.first_draw(space, bracket, cfg.seed, drawn, parts.max_members)
        drawn += [t.hparams for t in trials]
        rung = RungContext(steps={t.trial_id: steps_for(bracket.rungs[0].r,
                                                        t.batch_size,
                                                        dataset.train_size)
                                  for t in trials})
        packs = [group for group, _ in parts.strategy.plan(trials, capacity, rung)]
        record["first_rung_packs"] = [[t.trial_id for t in p] for p in packs]
        record["first_rung_pack_batch_sizes"] = [
            [t.batch_size for t in p] for p in packs]
    payload["capacity"] = {"source": source, "bytes": capacity.limit,
                           "max_members": capacity.max_members}
    payload["strategy"] = component_name(cfg, "strategy")
    payload.update(scheduler.plan_facts())
    if parts.sampler.learns:  # only the first bracket's draws are known before results
        payload["sampled_as_results_arrive"] = True
        log.warning("sampler=%s samples each bracket's configurations from the results of "
                    "the brackets before it: the packs shown after the first bracket are "
                    "random draws, not the search's", component_name(cfg, "sampler"))
    write_json(run_dir / "plan.json", payload)
    print_plan(payload, run_dir / "plan.json", scheduler.plan_title(len(payload["brackets"])))
    key = "epochs_continued" if scheduler.continue_on_promotion else "epochs_from_scratch"
    return float(sum(b[key] for b in payload["brackets"]))
