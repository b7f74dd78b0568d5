"""packexp from Python: ``tune`` runs ``python -m packexp``'s job on the same composed config;
``load`` reads a finished search back; ``refit`` trains its best configuration again on all
its rows.

A builder function, arrays or a search-space dict replace their group's node in the composed
config before the job starts, so the same checks read them. Hydra runs no multirun from
Python (hydra#2673): a sweep is a loop over ``tune`` calls.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from packexp.app.given import (
    arrays_of,
    is_pipeline,
    overrides_for,
    pipelines_of,
    quoted,
    refuse_lost_keys,
    use_builder,
    use_search_space,
    write_arrays,
    write_pipelines,
)
from packexp.errors import ConfigError
from packexp.files import conf_dir, packexp_home
from packexp.records.search_result import SearchResult
from packexp.runner import study

__all__ = ["SearchResult", "load", "refit", "tune"]

CONF_DIR = Path(conf_dir())

# What a builder, arrays and a dict are called where the config names its choices.
ARRAYS_FILE = "data.npz"
# Where a tf.data.Dataset given as data is written, as TFRecords read by dataset=tfrecord.
RECORDS_DIR = "records"


def tune(model: str | Callable[..., Any] | None = None,
         data: str | Sequence[Any] | None = None,
         search_space: str | Mapping[str, Any] | None = None, *,
         overrides: Sequence[str] = (), run_dir: str | Path | None = None,
         verbose: bool = False, trainer: Any = None, **settings: Any) -> SearchResult:
    """Runs a packed Hyperband search and returns its result.

    Args:
        model: A config name from ``conf/model/`` (``"mlp3"``), or a builder function
            ``build(input_shape, num_classes, hparams, **settings) -> keras.Model`` (README,
            "Your own model"). One defined in a notebook or ``__main__`` trains under
            ``executor=local`` only; Ray workers must import it from a module.
        data: A config name from ``conf/dataset/`` (``"digits"``), or arrays: ``(x, y)``,
            split into training and validation by ``seed`` as digits is, or
            ``(x_train, y_train, x_val, y_val)``. ``x`` is 2-D features or sequences
            ``[n, steps, features]`` (both standardised on the training split), or uint8
            images ``[n, h, w, c]``; labels any values, mapped to
            0..k-1 in sorted order (under ``objective="regression"``, real values). The
            arrays are kept in the run directory (``data.npz``, read as ``dataset=arrays``
            reads a file).
        search_space: A config name from ``conf/search_space/`` or a dict in the YAML's
            form: ``{"params": {...}, "categorical": [...]}``, or the ``params`` alone.
        overrides: Hydra overrides as on the command line (``["scheduler.R=27"]``).
        run_dir: The run directory (``hydra.run.dir``); by default a new one under
            ``runs/`` in packexp's home (``$PACKEXP_HOME``, else ``~/packexp``), which also
            holds the MLflow store, the cost strategy's calibrations and mnist1d's download
            unless ``tracking.store_dir``, ``strategy.calibration_dir`` or
            ``dataset.cache_dir`` say otherwise. A call writes nothing in the working
            directory unless told to.
        verbose: Show the progress bar and the summary the command line prints; by default
            the call prints nothing but warnings (the result holds the same).
        trainer: What trains the packs (``packexp.executors.Trainer``): TensorFlow's by
            default; ``packexp.testing.FakeTrainer`` drives the whole search, its journal,
            tracking and result, without training (a scheduler's research, a test).
        **settings: Any other override by its top-level key: a config group's option
            (``strategy="knn"``, ``objective="regression"``), a value (``seed=3``,
            ``resume=True``) or a dict of values (``scheduler={"R": 27}`` is
            ``scheduler.R=27``; ``objective={"metric": "val_loss", "mode": "min"}``).

    Raises:
        ConfigError: A config key or value, or the data, cannot be used; the message is
            the line ``python -m packexp`` prints.
        ExecutorError, TrackingError: As on the command line.
    """
    called = time.time()  # the search's startup_s counts from here
    if isinstance(overrides, str):
        raise ConfigError(f"overrides={overrides!r}: give a list of overrides, e.g. "
                          "[\"scheduler.R=27\"]")
    if settings.get("resume") and run_dir is None:
        raise ConfigError("resume=True: give run_dir=, the directory of the run to continue")
    args = [*overrides, *(override for key, value in settings.items()
                          for override in overrides_for(key, value))]
    for group, value in (("model", model), ("dataset", data), ("search_space", search_space)):
        if isinstance(value, str):
            args.append(f"{group}={value}")
    if model is not None and not isinstance(model, str) and not callable(model):
        raise ConfigError(f"model={model!r}: give a config name from conf/model/ or a "
                          "builder function")
    streams = pipelines_of(data)
    arrays = None if data is None or isinstance(data, str) or streams else arrays_of(data)
    if arrays is not None:
        args.append("dataset=arrays")
    if streams:
        args.append("dataset=tfrecord")
    if run_dir is not None:
        args.append(f"hydra.run.dir={quoted(str(run_dir))}")
    with _hydra() as hydra:
        cfg = compose(args)
        if callable(model):
            use_builder(cfg, model, args)
        if search_space is not None and not isinstance(search_space, str):
            refuse_lost_keys("search_space", args, "a search-space dict given as "
                             "search_space takes no search_space keys; put them in the dict")
            use_search_space(cfg, search_space)
        out = Path(str(cfg.hydra.run.dir))  # read once: ${now:...} changes at each read
        if not set_in(args, "hydra.run.dir"):
            out = home() / "runs" / out.name
        with open_dict(cfg):
            cfg.hydra.run.dir = str(out)
            keep_in_home(cfg, args)
            if arrays is not None:
                cfg.dataset.path = str(out.resolve() / ARRAYS_FILE)
            if streams:  # written as TFRecords of tensors, streamed as dataset=tfrecord
                records = out.resolve() / RECORDS_DIR
                cfg.dataset.path = str(records / "train")
                cfg.dataset.val_path = str(records / "val") if len(streams) == 2 else None
                cfg.dataset.image_key, cfg.dataset.label_key = "x", "y"
        if cfg.get("task") != "tune":
            raise ConfigError(f"task={cfg.get('task')!r}: packexp.tune runs task=tune; run "
                              "other tasks with python -m packexp")
        from hydra._internal.callbacks import Callbacks  # as Hydra.run builds it (hydra-core 1.3)
        from hydra.core.utils import JobStatus, run_job
        from hydra.types import HydraContext

        from packexp.app.session import make_dir, refuse_run_dir

        if cfg.get("resume"):  # a resume that cannot be is refused before Hydra writes
            refuse_run_dir(cfg)  # there, as on the command line (write_arrays refuses the rest)

        make_dir("run_dir" if set_in(args, "hydra.run.dir") else "PACKEXP_HOME", out)
        returned = run_job(task_function=lambda task_cfg: _job(task_cfg, arrays or streams,
                                                                called, verbose, trainer),
                           config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                           hydra_context=HydraContext(config_loader=hydra.config_loader,
                                                      callbacks=Callbacks(cfg)),
                           configure_logging=False)
        if returned.status == JobStatus.FAILED:  # its own error, without Hydra's printed line
            raise returned._return_value
    return load(returned.hydra_cfg.hydra.runtime.output_dir)


def load(run_dir: str | Path) -> SearchResult:
    """The ``SearchResult`` of the finished search in ``run_dir`` (``runner.study.load``),
    whose ``best_model()`` builds a model kept as weights only again from the run's builder
    where it imports here (``packexp.app.rebuild``).

    Raises:
        FileNotFoundError: ``run_dir`` holds no finished search (the message says why).
        ValueError: Its ``results.json`` is not a search's.
    """
    from packexp.app.rebuild import kept_model

    return dataclasses.replace(study.load(run_dir), rebuild=kept_model)


def refit(run_dir: str | Path, epochs: float | None = None) -> Any:
    """Trains the best configuration of the finished search in ``run_dir`` again, from
    scratch, on the training and validation rows together (scikit-learn's ``refit``), and
    keeps it as ``<run_dir>/models/refit.keras``: ``python -m packexp task=refit
    hydra.run.dir=<run_dir>`` in this process.

    The run's data is read as the search read it (its ``.hydra/config.yaml``); both splits
    are standardised by the training split's statistics, as in the search, so the model
    takes the rows as they were given. It trains alone, with the best trial's hyper-parameters
    and seed (a refit is reproducible), and has no validation score: no rows are held out.
    ``results.json``'s ``refit`` records ``file``, ``trial_id``, ``hparams``, ``epochs``,
    ``seed``, ``train_rows`` and ``train_loss`` (the mean training loss of its last epoch);
    ``packexp.load(run_dir).facts.refit`` reads it back. A tracked search's MLflow run gets
    it as the MLflow Model ``refit_model`` (``mlflow_model`` says where).

    Args:
        run_dir: The run directory of a finished search.
        epochs: Epochs to train; None for the epochs the best trial trained.

    Returns:
        The refit model (a ``keras.Model``, ``load(run_dir).refit_model()``): it takes the
        rows as they were given to the search, as ``best_model()`` does.

    Raises:
        ConfigError: No such directory, no finished search in it, no best trial, a best of
            ``scheduler=pbt`` whose values changed as it trained, or streamed data; one line.
    """
    from packexp.app.main import start_tensorflow
    from packexp.app.tasks.refit import refit_here

    refit_here(run_dir, epochs, start=start_tensorflow)
    return load(run_dir).refit_model()


def home() -> Path:
    """Where ``tune`` keeps what no argument places: ``$PACKEXP_HOME``, else ``~/packexp``."""
    where = packexp_home()
    if where is None:  # no HOME and no passwd entry (a container's arbitrary user)
        raise ConfigError("PACKEXP_HOME: not set, and this user has no home directory; set "
                          "PACKEXP_HOME=<a directory>, or give run_dir=")
    return where


# Keys whose default is a path under the working directory's outputs/, as the command line
# writes: a call keeps them under home() instead.
HOME_KEYS = ("tracking.store_dir", "strategy.calibration_dir", "dataset.cache_dir",
             "device.probe_dir")


def keep_in_home(cfg: DictConfig, args: Sequence[str]) -> None:
    """Each of ``HOME_KEYS`` whose value is under ``outputs/`` (the MLflow store, the
    calibrations, mnist1d's download cache, the memory probes) moved under ``home()``,
    unless ``args`` set it: a library call writes nothing where it is called from."""
    for key in HOME_KEYS:
        value = OmegaConf.select(cfg, key)
        parts = Path(value).parts if isinstance(value, str) else ()
        if parts and parts[0] == "outputs" and not set_in(args, key):
            OmegaConf.update(cfg, key, str(home().joinpath(*parts[1:])))


def set_in(args: Sequence[str], key: str) -> bool:
    """Whether the overrides ``args`` set ``key``."""
    return any(a.lstrip("+~").split("=", 1)[0] == key for a in args)


def compose(args: list[str]) -> DictConfig:
    """The config ``python -m packexp`` composes under ``args``, with its ``hydra`` node; a
    composition error is a ``ConfigError`` of one line."""
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException

    from packexp.config import register_resolvers

    register_resolvers()
    try:
        return hydra_compose("config", overrides=args, return_hydra_config=True)
    except HydraException as e:
        raise ConfigError(" ".join(str(e).split())) from None


@contextmanager
def _hydra() -> Iterator[Any]:
    """Hydra initialised on packexp's ``conf/``; one already initialised (a Hydra app's
    that calls ``tune``) is put back after."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    gh = GlobalHydra.instance()
    outer = gh.hydra if gh.is_initialized() else None
    gh.clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3",
                                   job_name="packexp"):
            yield GlobalHydra.instance().hydra
    finally:
        if outer is not None:
            GlobalHydra.instance().clear()
            GlobalHydra.instance().initialize(outer)


def _job(cfg: DictConfig, arrays: tuple[Any, ...] | None, called: float,
         verbose: bool, trainer: Any = None) -> float:
    """``python -m packexp``'s job, with the arrays checked and written where the config
    reads them, the job's log in the run directory's ``packexp.log``, its ``startup_s``
    counted from the ``tune`` call, and its progress and summary shown if ``verbose``."""
    from packexp.app.main import check, job, trains_here
    from packexp.app.session import count_next_job_from
    from packexp.records.report import verbose as showing

    check(cfg)  # the command line's checks first: a bad value is named as there
    if _in_process(cfg) and not trains_here(cfg):
        raise ConfigError(f"model: {cfg.model._target_.rsplit('.', 1)[-1]} was defined in "
                          "a notebook or __main__, where executor=ray's workers cannot "
                          "import it; define the builder in a module on their path")
    if arrays and is_pipeline(arrays[0]):
        write_pipelines(cfg, arrays)
    elif arrays is not None:
        write_arrays(cfg, arrays)
    count_next_job_from(called)
    # The search seeds Python's and NumPy's global generators; the caller's are put back.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    token = showing.set(bool(verbose))
    try:
        with _logged():
            return job(cfg, trainer)
    finally:
        showing.reset(token)
        count_next_job_from(None)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _in_process(cfg: DictConfig) -> bool:
    from packexp.app import in_process

    return in_process.is_in_process(cfg.model.get("_target_", ""))


@contextmanager
def _logged() -> Iterator[None]:
    """The job's log at INFO in the run directory's ``packexp.log``, and its warnings on
    stderr; the caller's logging is left as it was (the command line's Hydra logging would
    take over the root logger)."""
    from hydra.core.hydra_config import HydraConfig

    file = logging.FileHandler(Path(HydraConfig.get().runtime.output_dir) / "packexp.log")
    file.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - "
                                        "%(message)s"))
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logging.Formatter("packexp: %(levelname)s: %(message)s"))
    logger = logging.getLogger("packexp")
    saved = logger.level, logger.propagate
    for handler in (file, warnings):
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        for handler in (file, warnings):
            logger.removeHandler(handler)
        logger.level, logger.propagate = saved
        file.close()
