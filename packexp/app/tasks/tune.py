"""``task=tune``: a packed Hyperband search, journaled, tracked and summarised."""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from packexp import startup
from packexp.app.interrupts import job_resume_command
from packexp.app.session import command_started, comparable, tracked
from packexp.app.tasks.plan import plan_dict
from packexp.app.tasks.refit import refit_after_search
from packexp.config import task_overrides
from packexp.config.components import Components
from packexp.events import Listeners, SearchFinished, Summary
from packexp.executors import Trainer
from packexp.files import write_json
from packexp.listeners import SearchProgress
from packexp.records.report import print_summary
from packexp.records.search_result import SearchResult
from packexp.runner import PackedSearch, SearchSettings, Study
from packexp.runner.budget import unscored
from packexp.runner.keep import KeepModels
from packexp.runner.signals import held
from packexp.space import Trial
from packexp.startup import mark
from packexp.strategies import WeighsCosts
from packexp.tracking.models import log_best_model

log = logging.getLogger(__name__)


def tune(cfg: DictConfig, run_dir: Path, trainer: Trainer | None = None) -> float:
    """Packed Hyperband over ``cfg.search_space`` (with ``resume=true``, the search journaled
    in ``run_dir`` continued); writes ``results.json``; returns the best objective value
    (``cfg.objective``'s metric: by default the best validation accuracy). ``trainer`` trains
    the packs: TensorFlow's when None (``executors.Trainer``)."""
    job_started = command_started()
    parts = Components.build(cfg, trainer=trainer)
    scheduler, executor = parts.scheduler, parts.executor(run_dir)
    if ahead := parts.run.budget.ahead(scheduler):  # a budget its schedule may end first
        log.info(ahead)
    own = parts.listeners(run_dir)  # the config's, built before anything is written
    stated = parts.facts()  # the names, seed and schedule, as results.json states them
    study = open_study(cfg, run_dir, parts)
    plan = plan_dict(scheduler)  # the brackets as planned, before anything trains
    write_json(run_dir / "plan.json", plan)
    mark("tracker")
    cache = parts.cache()  # this process's: the members the memory estimate measures
    mark("data")
    with closing(executor.start(cache)):
        facts = parts.trainer.device_facts(parts, executor)  # the device packs train on
        log.info("device: %s", facts)
        mark("executor")
        with tracked(cfg, run_dir, dataset=parts.dataset, study=study,
                     run_name=parts.run_name,
                     tags={**parts.names, "task": "tune", **facts.tags()}) as tracker:
            mark("tracker")
            device = parts.trainer.prepare_device(parts, cache, executor, facts, run_dir)
            calibration = (parts.strategy.calibration_used()
                           if isinstance(parts.strategy, WeighsCosts) else None)
            if calibration:  # on the run now: an interrupted search shows it too
                tracker.on_summary(Summary(tags={f"calibration_{k}": v
                                                 for k, v in calibration.items()}))
            with SearchProgress(scheduler) as progress:
                listeners = Listeners([tracker, progress, *own])
                search = PackedSearch(
                    space=parts.space, strategy=parts.strategy, capacity=device.capacity,
                    executor=executor, study=study, listeners=listeners,
                    settings=SearchSettings(
                        seed=parts.run.seed, tags=parts.names, capacity_source=device.source,
                        continue_on_promotion=scheduler.continue_on_promotion,
                        lr_horizon=scheduler.horizon_epochs, probe_seconds=device.probe_seconds,
                        train_size=cache.data.train_size, budget=parts.run.budget,
                        keep=KeepModels(parts.run.keep_models, parts.objective),
                        surrogate=parts.run.surrogate),
                    sampler=parts.sampler)
                if study.resumed:
                    log.info("resuming: %d member results from %s", study.replayed.members,
                             study.journal.path)
                    executor.discard(study.checkpoints())
                search.run(scheduler)
                if search.stopped is None:  # a stopped search's trials go on when resumed
                    search.finish()
                else:
                    log.info("search stopped early: %s", search.stopped)
            result = study.result(
                wall_time_s=search.searched_s(),  # from the first pack: startup_s adds up
                models=hand_over(search, cache, run_dir, parts.trainer),
                mlflow_run_id=tracker.run_id, **stated,
                calibration_s=round(device.calibration_s, 3), calibration=calibration,
                startup_s=None if search.first_pack_at is None
                else round(search.first_pack_at - job_started, 3),
                startup=None if search.first_pack_at is None
                else startup.phases(job_started, search.first_pack_at),
                capacity={"bytes": device.capacity.limit, "max_members": parts.max_members},
                memory_probes=device.memory_probes(),
                workers=executor.usage(), stopped=search.stopped,
                **simulation_facts(executor, search.first_pack_at))
            if where := log_best_model(tracker, result, run_dir, parts.dataset, cfg):
                result = result.with_facts(mlflow_model=where)
            finish(result, study, listeners)
            resume = None if search.stopped is None else (  # with the budget it needs
                job_resume_command([parts.run.budget.raised(search.stopped)])
                or f"resume=true hydra.run.dir={run_dir}")
            if search.stopped is not None and result.best is None:
                log.warning(unscored(search.stopped, resume))
            if search.stopped is None:  # journaled as finished: no resume needs them
                shutil.rmtree(search.store.kept_root, ignore_errors=True)
    print_summary(result, tracker.location, parts.run.summary_top_k, lost=tracker.lost,
                  resume=resume)
    if parts.run.refit:
        refit_after_search(cfg, run_dir, parts)
    return float(result.metrics()["best_value"])


def open_study(cfg: DictConfig, run_dir: Path, parts: Components) -> Study:
    """The search's study in ``run_dir``: a fresh one, or on ``resume=true`` the run there
    continued; either checked against ``run_dir`` first (``Study.open``: a fresh run refuses
    a directory with a journal, a resume one whose config differs)."""
    return Study.open(run_dir, parts.objective, config=comparable(cfg),
                      overrides=task_overrides(), resume=parts.run.resume)


def hand_over(search: PackedSearch, cache: Any, run_dir: Path,
              trainer: Trainer) -> dict[str, dict[str, Any]]:
    """The models ``keep_models`` keeps, written to ``<run_dir>/models/`` from the states
    kept for them (``runner.keep``; the weights their reported scores came from), each as
    ``{"file", "rung", "epochs"}`` by trial; then any model a session before this one wrote
    that is no longer kept is deleted. The kept states stay until the journal says the search
    has finished (then ``tune`` deletes them): a search stopped early, or killed before then,
    hands the same models over when it is resumed."""
    started = time.perf_counter()
    chosen = search.keep.chosen(search.study)
    kept: dict[str, dict[str, Any]] = {}
    missing: set[str] = set()
    for trial_id, result in chosen.items():
        path = search.store.kept(trial_id, result.rung)
        if not path.is_file():
            missing.add(trial_id)  # a model written from it before, if any, is left alone
            log.warning("models: no kept state for %s's rung %d (%s); its model is not kept",
                        trial_id, result.rung, path)
            continue
        record = search.trials[trial_id]
        trial = Trial(trial_id, record.hparams_at(result.epochs), ())
        file = trainer.export(trial, trainer.read_state(path), cache, run_dir)
        kept[trial_id] = {"file": file.file, "rung": result.rung,
                          "epochs": int(result.epochs) if float(result.epochs).is_integer()
                          else result.epochs, **({} if file.whole else {"why": file.why})}
    files = {run_dir / k["file"] for k in kept.values()}
    for stale in (run_dir / "models").glob("*"):
        if (stale.is_file() and stale not in files and not stale.name.startswith("refit")
                and stale.name.split(".")[0] not in missing):
            stale.unlink()
    if kept:
        weights = [t for t, k in kept.items() if "why" in k]  # each said in its own line
        log.info("models: %d kept in %s (%.2f s)%s", len(kept), run_dir / "models",
                 time.perf_counter() - started,
                 f"; as weights only: {', '.join(weights)}" if weights else "")
    return kept


def simulation_facts(executor: Any, first_pack_at: float | None) -> dict[str, Any]:
    """What ``results.json`` adds for a simulated executor (``executor=simulated``), whose clock
    its times are on: ``simulated``, the simulation's settings, and the real seconds this
    session searched (``real_wall_time_s``, from its first pack); nothing for real workers."""
    if not executor.simulated:
        return {}
    return {"simulated": True, "simulation": executor.settings(),
            "real_wall_time_s": None if first_pack_at is None
            else round(time.time() - first_pack_at, 3)}


def finish(result: SearchResult, study: Study, listeners: Listeners) -> None:
    """Writes ``results.json`` and the plots, and tells the listeners: the study journals
    that the search has finished (or stopped early), the tracker gets its summary metrics
    and files."""
    run_dir = result.run_dir
    with held():  # a results.json whose search the journal has not finished would resume
        write_json(run_dir / "results.json", result.to_json())
        study.finish(result.wall_time_s, result.stopped)
        listeners.emit(SearchFinished(result))
    pictures = [(p, "plots") for p in result.write_plots(run_dir)]
    listeners.emit(Summary(result.metrics(), [
        (run_dir / "results.json", None), (run_dir / "plan.json", None), *pictures]))
