"""``task=plan``: the bracket table and the packs the search forms first; trains nothing."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

from hydra.utils import get_class
from omegaconf import DictConfig, open_dict

from packexp.config import component_name
from packexp.config.components import Components
from packexp.config.device import probe_worth_it
from packexp.executors import LocalExecutor, Trainer
from packexp.executors.base import DeviceReport
from packexp.files import write_json
from packexp.records.report import print_plan
from packexp.runner import SearchSettings
from packexp.runner.packs import form_packs, most_members, rung_context
from packexp.runner.settings import SearchContext
from packexp.schedulers import Scheduler
from packexp.space import Trial
from packexp.strategies import WeighsCosts

log = logging.getLogger(__name__)


def plan_dict(scheduler: Scheduler) -> dict:
    brackets = scheduler.brackets()
    return {"R": scheduler.R, "eta": scheduler.eta, "brackets": [
        {"s": b.s, "rungs": [{"n": r.n, "r": r.r} for r in b.rungs],
         "epochs_continued": scheduler.epochs(b, True),
         "epochs_from_scratch": scheduler.epochs(b, False)}
        for b in brackets]}


def plan(cfg: DictConfig, run_dir: Path, trainer: Trainer | None = None) -> float:
    """Prints and writes the bracket table and the packs the search forms first (each
    bracket's first rung; an asynchronous scheduler's first plan), readied as ``task=tune``
    readies its search: the trainer's capacity, the strategy's calibration (kept, or measured
    and kept), this process's cache. Trains no pack of the search.

    Returns:
        The epochs the whole search trains, under the configured continuation.
    """
    # No memory probe: a probe trains a member. The estimate plans; the line says where the
    # search would probe (device.probe), which may shrink its packs.
    planning = copy.deepcopy(cfg)
    if cfg.device.probe in (True, "auto"):  # another value is refused as the search refuses it
        with open_dict(planning):
            planning.device.probe = False
    parts = Components.build(planning, trainer=trainer)
    space, scheduler = parts.space, parts.scheduler
    payload = plan_dict(scheduler)
    cache = parts.cache()
    # Where a search's packs train, this process stands in: a plan starts no workers.
    executor = LocalExecutor(cfg, run_dir, parts.trainer).start(cache)
    device = parts.trainer.prepare_device(parts, cache, executor,
                                          parts.trainer.device_facts(parts, executor), run_dir)
    context = SearchContext(space, parts.strategy, device.capacity, SearchSettings(
        seed=parts.run.seed, capacity_source=device.source,
        continue_on_promotion=scheduler.continue_on_promotion,
        train_size=cache.data.train_size))
    brackets = scheduler.brackets()
    drawn: list[Trial] = []  # as the search, no bracket draws an earlier one's configurations
    for bracket, record in zip(brackets, payload["brackets"], strict=True):
        trials = scheduler.first_draw(space, bracket, parts.run.seed,
                                      [t.hparams for t in drawn], most_members(device.capacity))
        drawn += trials
        rung = rung_context(context, cache, executor.view(), trials, bracket, 0, brackets)
        packs = [group for group, _ in form_packs(context, trials, rung)]
        record["first_rung_packs"] = [[t.trial_id for t in p] for p in packs]
        record["first_rung_pack_batch_sizes"] = [[t.batch_size for t in p] for p in packs]
        record["first_rung_configs"] = {t.trial_id: dict(t.hparams) for t in trials}
    payload["capacity"] = {"source": device.source, "bytes": device.capacity.limit,
                           "max_members": device.capacity.max_members}
    payload["strategy"] = component_name(cfg, "strategy")
    payload.update(scheduler.plan_facts())
    if parts.sampler.learns:  # only the first bracket's draws are known before results
        payload["sampled_as_results_arrive"] = True
        log.warning("sampler=%s samples each bracket's configurations from the results of "
                    "the brackets before it: the packs shown after the first bracket are "
                    "random draws, not the search's", component_name(cfg, "sampler"))
    if isinstance(parts.strategy, WeighsCosts):
        payload["calibration"] = parts.strategy.calibration_used()
    payload["run_may_differ"] = run_may_differ(parts, device, cfg.device.probe, drawn,
                                               len(brackets))
    write_json(run_dir / "plan.json", payload)
    print_plan(payload, run_dir / "plan.json", scheduler.plan_title(len(payload["brackets"])))
    key = "epochs_continued" if scheduler.continue_on_promotion else "epochs_from_scratch"
    return float(sum(b[key] for b in payload["brackets"]))


def run_may_differ(parts: Components, device: DeviceReport, probe: bool | str,
                   drawn: list[Trial], brackets: int) -> list[str]:
    """What can make the search, started with the same config and seed, form other packs than
    the plan shows: what it measures anew (``probe``: its ``device.probe``, for the
    configurations ``drawn``), and what it learns only as it trains."""
    reasons = []
    if not get_class(parts.cfg.executor._target_).trains_here:
        reasons.append(f"executor={component_name(parts.cfg, 'executor')}'s workers, which "
                       "measure their own capacity and calibration")
    if isinstance(parts.strategy, WeighsCosts) and (used := parts.strategy.calibration_used()):
        reasons.append(f"a calibration other than {used['digest']}" + (
            " (strategy.calibration_dir=null: the search measures its own)"
            if used["source"] != "file" and parts.cfg.strategy.get("calibration_dir") is None
            else ""))
        if brackets > 1:
            reasons.append("what earlier brackets leave in the pack cache, which later "
                           "brackets' packs weigh")
    if device.source.startswith("device."):  # a memory capacity, not a count
        capacity = device.capacity
        probed = sorted({t.batch_size for t in drawn if probe_worth_it(
            probe, int(capacity.cost(t)), parts.max_members, capacity.limit, device.source)})
        reasons.append((f"memory probes of batch sizes {probed} (device.probe={probe}), "
                        if probed else "") + "a pack out of memory (split in two)")
    return reasons
