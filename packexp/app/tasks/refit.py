"""``task=refit``: a finished search's best configuration trained again from scratch on the
training and validation rows together (scikit-learn's ``refit``), kept as
``models/refit.keras``."""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from packexp.config.run import epochs_setting
from packexp.errors import ConfigError, flag
from packexp.files import write_json
from packexp.records.best import Best
from packexp.runner.replay import Recorded
from packexp.runner.study import load
from packexp.space import Trial, derive_seed
from packexp.space.options import steps_for

log = logging.getLogger(__name__)

NAME = "refit"  # models/refit.keras (tune's hand_over leaves models/refit* alone)
RUN_CONFIG = Path(".hydra") / "config.yaml"  # the config Hydra kept with the run
# The keys task=refit takes from its own command line; everything else is the run's.
COMMAND_KEYS = ("task", "refit", "refit_epochs")
# How SearchSpace.sample names a bracket's draws: b<bracket>-t<index>, seeded
# derive_seed(seed, bracket, index + 1).
DRAWN_ID = re.compile(r"b(\d+)-t(\d+)")


def check_settings(cfg: DictConfig) -> None:
    """``refit`` and ``refit_epochs``, each refused in one line naming it, before TensorFlow
    loads; and ``refit=true`` with a scheduler that makes exploits (``scheduler=pbt``), whose
    best weights come from a schedule of values, not one configuration (its kept model is
    the trained one), or with a dataset that streams (``dataset.cache=none``)."""
    on = cfg.get("refit")
    if on is not None:
        flag("refit", on, error=ConfigError)
    epochs_setting("refit_epochs", cfg.get("refit_epochs"))
    if not on or cfg.get("task") != "tune":
        return
    if explores(cfg):
        raise ConfigError("refit=true: this scheduler's members copy each other's weights "
                          "and change their values as they train (scheduler=pbt), so its "
                          "best is a schedule, not one configuration to train from scratch; "
                          "use its kept model (keep_models=best)")
    if OmegaConf.select(cfg, "dataset.cache") == "none":
        raise ConfigError("dataset.cache=none: refit=true trains on the training and "
                          "validation rows merged in memory, and this dataset streams them "
                          "from its files; use dataset.cache=memory (or auto)")


def explores(cfg: DictConfig) -> bool:
    """Whether ``cfg.scheduler`` makes exploits (a scheduler that cannot be found is refused
    where the search instantiates it)."""
    from hydra.utils import get_class

    from packexp.schedulers import Scheduler

    try:
        scheduler = get_class(str(cfg.scheduler._target_))
    except Exception:
        return False
    return issubclass(scheduler, Scheduler) and scheduler.explores


def refit(cfg: DictConfig, run_dir: Path, trainer: Any = None) -> float:
    """``task=refit``: the best configuration of the search in ``run_dir`` (its
    ``hydra.run.dir``) trained from scratch on the training and validation rows together,
    for ``refit_epochs`` or the epochs the best trial trained, with the best trial's seed;
    written to ``models/refit.keras`` and recorded as ``results.json``'s ``refit``.

    Returns:
        The refit model's mean training loss over its last epoch (no rows are held out from
        it, so it has no validation score).
    """
    best = refittable(run_dir)
    record = refit_run(run_config(run_dir), run_dir, best,
                       epochs_setting("refit_epochs", cfg.get("refit_epochs")), trainer=trainer)
    return float("nan") if record["train_loss"] is None else float(record["train_loss"])


def refit_after_search(cfg: DictConfig, run_dir: Path, parts: Any) -> None:
    """``refit=true``: the search just finished in this process is refit with its own
    config and data (``parts``: its ``Components``); a search that scored no trial has no
    best, which is said, not refused (its results stand)."""
    best = refittable(run_dir, strict=False)
    if best is not None:
        refit_run(cfg, run_dir, best, cfg.get("refit_epochs"), parts=parts)


def refit_here(run_dir: str | Path, epochs: float | None, start: Callable[[], None]) -> Path:
    """``packexp.refit``: ``refit_run`` on the run's kept config in this process, ``start``
    called (TensorFlow started, as the command line starts it) once the run and ``epochs``
    are found refittable, and the caller's Python and NumPy random generators put back
    after (a member's build seeds them)."""
    run_dir = Path(run_dir)
    epochs_setting("epochs", epochs)
    best = refittable(run_dir)
    cfg = run_config(run_dir)
    start()
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        record = refit_run(cfg, run_dir, best, epochs)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
    return run_dir / record["file"]


def refittable(run_dir: Path, strict: bool = True) -> Best | None:
    """The best of the finished search in ``run_dir`` (``results.json``'s ``best``), or a
    ``ConfigError`` of one line: no such directory, no finished search (no
    ``results.json``, or a resume of it since), no best (None instead, unless ``strict``),
    or a best that is a population's schedule. Reads no TensorFlow."""
    key = f"hydra.run.dir={run_dir}"
    if not run_dir.is_dir():
        raise ConfigError(f"{key}: no such directory; give the run directory of a finished "
                          "search")
    results = run_dir / "results.json"
    if not results.is_file():
        held = "its search is running, was interrupted or failed; resume it with "\
               "resume=true first" if Recorded.there(run_dir) else "it holds no search"
        raise ConfigError(f"{key}: has no results.json, so no finished search to refit "
                          f"({held})")
    if Recorded.read(run_dir).resumed_since_its_end:
        raise ConfigError(f"{key}: its search was resumed and has not finished again (its "
                          "results.json is the earlier session's); refit it once it has")
    best = load(run_dir).best
    if best is None:
        if strict:
            raise ConfigError(f"{key}: its search scored no trial, so it has no best "
                              "configuration to refit")
        log.warning("refit: the search scored no trial, so it has no best configuration to "
                    "refit")
        return None
    if len(best.schedule or ()) > 1:
        raise ConfigError(f"{key}: its best, {best.trial_id}, trained on weights copied "
                          "from other members with values that changed as it went "
                          f"(scheduler=pbt: {len(best.schedule)} stretches), so it is no "
                          "one configuration to train from scratch; its kept model "
                          f"({best.model or 'keep_models'}) is the trained one")
    return best


def run_config(run_dir: Path) -> DictConfig:
    """The config the search in ``run_dir`` ran with, as Hydra kept it (``.hydra/config.yaml``,
    which ``python -m packexp`` and ``packexp.tune`` write, unresolved), with
    ``dataset.images=auto`` settled as the run settled it."""
    from packexp.config import config_errors, fit_dataset_to_model, register_resolvers

    path = run_dir / RUN_CONFIG
    if not path.is_file():
        raise ConfigError(f"hydra.run.dir={run_dir}: has no {RUN_CONFIG}, the config its "
                          "search ran with, so its data and model cannot be built again")
    register_resolvers()
    cfg = OmegaConf.load(path)
    with config_errors():
        fit_dataset_to_model(cfg)
    return cfg


def trial_seed(records: Sequence[Mapping[str, Any]], seed: int, trial_id: str) -> int:
    """The seed ``trial_id`` trained with (its initial weights and data order): as a plan
    that drew it journaled it (an asynchronous scheduler's, ``PlanRecord.sampled``), else as
    ``SearchSpace.sample`` derives a bracket's draw's from the root ``seed``."""
    for record in records:
        for drawn in (record.get("sampled") or []) if record["event"] == "plan" else []:
            if drawn["trial_id"] == trial_id:
                return int(drawn["seed"])
    named = DRAWN_ID.fullmatch(trial_id)
    if named is None:
        raise ConfigError(f"refit: cannot tell the seed {trial_id} trained with (neither "
                          "journaled nor named b<bracket>-t<index>)")
    return derive_seed(seed, int(named[1]), int(named[2]) + 1)


def merged(dataset: Any, cfg: DictConfig) -> Any:
    """``dataset`` with its validation rows appended to its training rows.

    Both splits are already mapped by the training split's standardisation (``inputs``, and
    a regression's ``targets``), so the merged rows are consistent and the refit model keeps
    that same map: its first layer is the search's models'. The validation split is left in
    place for the trainer's evaluation, whose score is not reported: those rows are trained
    on."""
    from packexp.data import Dataset

    if getattr(dataset, "streams", False) or not isinstance(dataset, Dataset):
        setting = OmegaConf.select(cfg, "dataset.cache")
        key = ("dataset" if setting is None else f"dataset.cache={setting}")
        raise ConfigError(f"{key}: the run's data streams from its files, and a refit "
                          "trains on its training and validation rows merged in memory; "
                          "refit a run whose data is held in memory (dataset.cache=memory)")
    return dataclasses.replace(
        dataset, x_train=np.concatenate([dataset.x_train, dataset.x_val]),
        y_train=np.concatenate([dataset.y_train, dataset.y_val]))


def refit_run(cfg: DictConfig, run_dir: Path, best: Best,
              epochs: float | None = None, parts: Any = None,
              trainer: Any = None) -> dict[str, Any]:
    """Trains ``best``, the search's in ``run_dir`` (``refittable``), from scratch, alone, on
    the training and validation rows together, for ``epochs`` (None: the epochs the best
    trial trained) with the best trial's seed, its learning-rate schedule (if any) spanning
    those epochs; writes ``models/refit.keras`` (``packing.export``) and ``results.json``'s
    ``refit``: ``file``, ``trial_id``, ``hparams``, ``epochs``, ``seed``, ``train_rows``
    (training + validation), ``train_loss`` (the mean of its last epoch's steps) and
    ``seconds``.

    Args:
        cfg: The run's config.
        parts: Its ``Components`` when this process has them (``refit=true``); else built,
            with ``trainer`` (``executors.Trainer``; TensorFlow's when None).
    """
    from packexp.config.components import Components

    started = time.perf_counter()
    seed = trial_seed(Recorded.read(run_dir).lines, int(cfg.seed), best.trial_id)
    epochs = best.epochs if epochs is None else epochs
    trial = Trial(best.trial_id, dict(best.hparams), (), seed=seed)
    parts = parts or Components.build(cfg, probe=False, trainer=trainer)
    dataset = merged(parts.dataset, cfg)
    cache = parts.cache(dataset)
    # Two stretches, the last epoch the second, so that its mean loss is the one reported;
    # the schedule spans both, and the second goes on from the first's state as a promoted
    # member does. One where the last epoch has no step of its own (fewer rows than batches).
    states: dict[str, Any] = {}
    for until in _stretches(float(epochs), trial.batch_size, dataset.train_size):
        [run] = parts.trainer.train_group([trial], cache, until, states,
                                          lr_horizon=float(epochs))
        [member] = run.members
        if member.failed:
            raise RuntimeError(f"refit: {trial.trial_id}'s loss diverged in its refit on "
                               f"{dataset.train_size} rows; no model was written")
        states = {trial.trial_id: member.state}
    kept = parts.trainer.export(trial, member.state, cache, run_dir, name=NAME)
    # A trainer that sums no stretch's losses (a fake one) gives its last chunk's mean.
    loss = member.mean_loss if member.mean_loss is not None else member.train_loss
    record = {"file": kept.file, "trial_id": trial.trial_id, "hparams": dict(trial.hparams),
              "epochs": int(epochs) if float(epochs).is_integer() else epochs, "seed": seed,
              "train_rows": dataset.train_size,
              "train_loss": None if loss is None else float(loss),
              "seconds": round(time.perf_counter() - started, 3)}
    if not kept.whole:
        record["why"] = kept.why
    log.info("refit: %s (%s) trained from scratch for %s epochs on %d rows (training %d + "
             "validation %d), seed %d: %s (%.1f s); no rows were held out, so it has no "
             "validation score", trial.trial_id, trial.hparams, record["epochs"],
             dataset.train_size, parts.dataset.train_size, parts.dataset.val_size, seed,
             run_dir / kept.file, record["seconds"])
    if kept.whole and (logged := log_refit(cfg, run_dir, record, parts.dataset)):
        record["mlflow_model"] = logged
    write_json(run_dir / "results.json", load(run_dir).with_facts(refit=record).to_json())
    return record


def log_refit(cfg: DictConfig, run_dir: Path, record: dict[str, Any],
              dataset: Any) -> dict[str, str] | None:
    """The refit model logged as an MLflow Model (``refit_model``) on the search's MLflow run
    (its journaled ``tracking`` run id), registered as ``tracking.register_as``'s next
    version where the run's config sets it; where it was logged, or None where the search
    was not tracked or the store refused (a warning: the model is kept in the run directory
    all the same)."""
    run_id = Recorded.read(run_dir).tracking_run_id
    if run_id is None:
        return None
    from packexp.tracking.base import TrackingError
    from packexp.tracking.models import example_rows, feature_columns, log_model_file

    example = example_rows(dataset)
    if example is None:
        return None
    tracker = run_tracker(cfg, run_dir)
    try:
        return log_model_file(
            tracker.location, run_id, run_dir / record["file"], "refit_model", example,
            getattr(tracker, "register_as", None), columns=feature_columns(cfg, dataset),
            outputs=(int(dataset.num_classes),),
            tags={"refit": True, **{k: record[k] for k in (
                "trial_id", "file", "epochs", "seed", "train_rows")}})
    except TrackingError as e:
        log.warning("refit: %s is kept, but not logged to MLflow run %s (%s)",
                    record["file"], run_id, e)
        return None


def run_tracker(cfg: DictConfig, run_dir: Path) -> Any:
    """The run's tracker as its config makes it, not started: its ``location`` is the run's
    tracking URI; a relative ``store_dir`` (a local store) is relative to where the search
    started (Hydra's ``runtime.cwd``)."""
    from packexp.config import instantiate

    node = cfg.tracking.copy()
    store = node.get("store_dir")
    kept = run_dir / ".hydra" / "hydra.yaml"
    if store is not None and not Path(str(store)).is_absolute() and kept.is_file():
        cwd = OmegaConf.select(OmegaConf.load(kept), "hydra.runtime.cwd")
        with open_dict(node):
            node.store_dir = str(Path(str(cwd)) / str(store))
    return instantiate(node, "tracking")


def keep_run_config(config: DictConfig) -> None:
    """``python -m packexp task=refit hydra.run.dir=RUN``, before Hydra writes in RUN: the
    run refused in one line if it cannot be refit, an override of any key but
    ``COMMAND_KEYS`` refused (the refit is the run's config's), and Hydra's ``.hydra``
    files not written, so that the run's stay the search's (``run_config`` reads them)."""
    from packexp.app.session import run_dir_given

    if not run_dir_given(config):
        raise ConfigError("task=refit: give hydra.run.dir=<the run directory of a finished "
                          "search>")
    overrides = OmegaConf.select(config, "hydra.overrides.task") or []
    other = next((o for o in map(str, overrides)
                  if o.lstrip("+~").split("=", 1)[0] not in COMMAND_KEYS), None)
    if other is not None:
        raise ConfigError(f"{other}: task=refit trains the run's best configuration with the "
                          "run's own config; it takes refit_epochs only")
    refittable(Path(str(config.hydra.run.dir)))
    with read_write(config.hydra):
        config.hydra.output_subdir = None


def _stretches(epochs: float, batch_size: int, train_size: int) -> list[float]:
    """The epochs a refit trains to, stretch by stretch: all but the last, then the last
    (whose mean loss is reported), or all at once where the last adds no step."""
    first = epochs - 1
    if first <= 0 or steps_for(first, batch_size, train_size) in (
            0, steps_for(epochs, batch_size, train_size)):
        return [epochs]
    return [first, epochs]
