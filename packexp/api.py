"""packexp from Python: ``packexp.tune(...)`` composes the config ``python -m packexp``
composes, runs the same job in this process and returns a ``SearchResult``.

Hydra composes the config from ``conf/`` with the call's overrides, as on the command line;
a builder function, arrays or a search-space dict replace their config group's node in the
composed config before the job starts, so the same checks read them. Hydra runs no multirun
from Python (hydra#2673): a sweep is a loop over ``tune`` calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from packexp.errors import ConfigError
from packexp.search_result import SearchResult, load

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

# What a builder, arrays and a dict are called where the config names its choices.
ARRAYS_FILE = "data.npz"
DICT_CHOICE = "dict"


def tune(model: str | Callable[..., Any] | None = None,
         data: str | Sequence[Any] | None = None,
         search_space: str | Mapping[str, Any] | None = None, *,
         overrides: Sequence[str] = (), run_dir: str | Path | None = None,
         **settings: Any) -> SearchResult:
    """Runs a packed Hyperband search and returns its result.

    Args:
        model: A config name from ``conf/model/`` (``"mlp3"``), or a builder function
            ``build(input_shape, num_classes, hparams, **settings) -> keras.Model`` (README,
            "Your own model"). One defined in a notebook or ``__main__`` trains under
            ``executor=local`` only; Ray workers must import it from a module.
        data: A config name from ``conf/dataset/`` (``"digits"``), or arrays: ``(x, y)``,
            split into training and validation by ``seed`` as digits is, or
            ``(x_train, y_train, x_val, y_val)``. ``x`` is 2-D features (standardised on the
            training split) or uint8 images ``[n, h, w, c]``; labels any values, mapped to
            0..k-1 in sorted order. The arrays are kept in the run directory
            (``data.npz``, read as ``dataset=arrays`` reads a file).
        search_space: A config name from ``conf/search_space/`` or a dict in the YAML's
            form: ``{"params": {...}, "categorical": [...]}``, or the ``params`` alone.
        overrides: Hydra overrides as on the command line (``["scheduler.R=27"]``).
        run_dir: The run directory (``hydra.run.dir``); by default a new one under
            ``outputs/runs/``, as on the command line.
        **settings: Any other override by its top-level key: a config group's option
            (``strategy="knn"``), a value (``seed=3``, ``resume=True``) or a dict of
            values (``scheduler={"R": 27}`` is ``scheduler.R=27``).

    Raises:
        ConfigError: A config key or value, or the data, cannot be used; the message is
            the line ``python -m packexp`` prints.
        ExecutorError, TrackingError: As on the command line.
    """
    called = time.time()  # the search's startup_s counts from here
    args = [*overrides, *(override for key, value in settings.items()
                          for override in overrides_for(key, value))]
    for group, value in (("model", model), ("dataset", data), ("search_space", search_space)):
        if isinstance(value, str):
            args.append(f"{group}={value}")
    if model is not None and not isinstance(model, str) and not callable(model):
        raise ConfigError(f"model={model!r}: give a config name from conf/model/ or a "
                          "builder function")
    arrays = None if data is None or isinstance(data, str) else arrays_of(data)
    if arrays is not None:
        args.append("dataset=arrays")
    if run_dir is not None:
        args.append(f"hydra.run.dir={quoted(str(run_dir))}")
    with _hydra() as hydra:
        cfg = compose(args)
        if callable(model):
            use_builder(cfg, model, cfg.hydra.overrides.task)
        if search_space is not None and not isinstance(search_space, str):
            use_search_space(cfg, search_space)
        out = Path(str(cfg.hydra.run.dir))  # read once: ${now:...} changes at each read
        with open_dict(cfg):
            cfg.hydra.run.dir = str(out)
            if arrays is not None:
                cfg.dataset.path = str(out.resolve() / ARRAYS_FILE)
        if cfg.get("task") != "tune":
            raise ConfigError(f"task={cfg.get('task')!r}: packexp.tune runs task=tune; run "
                              "other tasks with python -m packexp")
        from hydra._internal.callbacks import Callbacks  # as Hydra.run builds it (hydra-core 1.3)
        from hydra.core.utils import run_job
        from hydra.types import HydraContext

        returned = run_job(task_function=lambda task_cfg: _job(task_cfg, arrays, called),
                           config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                           hydra_context=HydraContext(config_loader=hydra.config_loader,
                                                      callbacks=Callbacks(cfg)),
                           configure_logging=False)
        _ = returned.return_value  # raises the job's exception
    return load(returned.hydra_cfg.hydra.runtime.output_dir)


def overrides_for(key: str, value: Any) -> list[str]:
    """The command-line overrides for one keyword of ``tune``: a dict becomes one override
    per leaf (``scheduler={"R": 27}`` -> ``scheduler.R=27``)."""
    if isinstance(value, Mapping):
        return [o for k, v in value.items() for o in overrides_for(f"{key}.{k}", v)]
    return [f"{key}={literal(value)}"]


def literal(value: Any) -> str:
    """``value`` in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))  # inf, -inf and nan as Hydra spells them
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ",".join(literal(v) for v in value) + "]"
    text = str(value)
    return text if text.replace("_", "").replace("-", "").isalnum() else quoted(text)


def quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def arrays_of(data: Any) -> tuple[np.ndarray, ...]:
    """``data`` as ``(x, y)`` or ``(x_train, y_train, x_val, y_val)`` NumPy arrays."""
    if not isinstance(data, Sequence) or len(data) not in (2, 4):
        raise ConfigError(f"data: give a config name from conf/dataset/, (x, y) or (x_train, "
                          f"y_train, x_val, y_val); got {type(data).__name__}"
                          + (f" of {len(data)}" if isinstance(data, Sequence) else ""))
    return tuple(np.asarray(a) for a in data)


def use_builder(cfg: DictConfig, build: Callable[..., Any], args: Sequence[str]) -> None:
    """The composed config's model becomes ``build`` (``packexp.in_process``); a model key
    among the overrides ``args`` would be lost, and is refused."""
    from packexp import in_process

    lost = next((a for a in args if a.lstrip("+~").startswith("model.")), None)
    if lost is not None:
        raise ConfigError(f"{lost}: a builder function given as model takes no model keys; "
                          "bind its settings with functools.partial(build, key=value)")
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": in_process.target(build), "_partial_": True})
        cfg.hydra.runtime.choices.model = getattr(build, "__name__", type(build).__name__)


def use_search_space(cfg: DictConfig, space: Any) -> None:
    """The composed config's search space becomes ``space``, a dict in the YAML's form."""
    if not isinstance(space, Mapping):
        raise ConfigError(f"search_space={space!r}: give a config name from "
                          "conf/search_space/ or a dict of hyper-parameters")
    spec = dict(space) if "params" in space else {"params": dict(space)}
    unknown = set(spec) - {"params", "categorical"}
    if unknown:
        raise ConfigError(f"search_space: {sorted(unknown)} are not keys of a search space; "
                          "give {'params': {...}, 'categorical': [...]} or the params alone")
    try:
        node = OmegaConf.create({"_target_": "packexp.search_space.SearchSpace",
                                 "_convert_": "all", "categorical": [], **spec})
    except Exception as e:
        raise ConfigError(f"search_space: {' '.join(str(e).split())}") from None
    with open_dict(cfg):
        cfg.search_space = node
        cfg.hydra.runtime.choices.search_space = DICT_CHOICE


def compose(args: list[str]) -> DictConfig:
    """The config ``python -m packexp`` composes under ``args``, with its ``hydra`` node; a
    composition error is a ``ConfigError`` of one line."""
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException

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


def _job(cfg: DictConfig, arrays: tuple[np.ndarray, ...] | None, called: float) -> float:
    """``python -m packexp``'s job, with the arrays checked and written where the config
    reads them, the job's log in the run directory's ``packexp.log``, and its ``startup_s``
    counted from the ``tune`` call."""
    from packexp.run import job, trains_here
    from packexp.session import count_next_job_from

    if _in_process(cfg) and not trains_here(cfg):
        raise ConfigError(f"model: {cfg.model._target_.rsplit('.', 1)[-1]} was defined in "
                          "a notebook or __main__, where executor=ray's workers cannot "
                          "import it; define the builder in a module on their path")
    if arrays is not None:
        write_arrays(cfg, arrays)
    count_next_job_from(called)
    try:
        with _logged():
            return job(cfg)
    finally:
        count_next_job_from(None)


def _in_process(cfg: DictConfig) -> bool:
    from packexp import in_process

    return in_process.is_in_process(cfg.model.get("_target_", ""))


def write_arrays(cfg: DictConfig, arrays: tuple[np.ndarray, ...]) -> None:
    """Checks ``arrays`` as ``dataset=arrays`` checks a file (one line naming ``data`` and
    the problem) and writes them to ``dataset.path``; a resumed run's file must hold the
    same arrays."""
    from packexp.data.arrays import from_arrays

    d = cfg.dataset
    from_arrays(*arrays[:2], *arrays[2:], name="arrays", source="packexp.tune(data=...)",
                val_fraction=d.val_fraction, standardize=d.standardize, seed=cfg.seed)
    keys = ("x", "y", "x_val", "y_val")[:len(arrays)]
    path = Path(d.path)
    if cfg.get("resume") and path.exists():
        with np.load(path, allow_pickle=False) as kept:
            if set(kept.files) != set(keys) or not all(
                    np.array_equal(kept[k], a) for k, a in zip(keys, arrays, strict=True)):
                raise ConfigError(f"resume=true: data differs from the arrays the run in "
                                  f"{path.parent} started with ({path})")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **dict(zip(keys, arrays, strict=True)))


@contextmanager
def _logged() -> Iterator[None]:
    """packexp's log lines of the job, at INFO, in the run directory's ``packexp.log`` (the
    command line's Hydra logging would take over the caller's root logger)."""
    from hydra.core.hydra_config import HydraConfig

    handler = logging.FileHandler(Path(HydraConfig.get().runtime.output_dir) / "packexp.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - "
                                           "%(message)s"))
    logger = logging.getLogger("packexp")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
