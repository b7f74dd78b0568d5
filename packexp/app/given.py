"""What a ``tune`` call gives in Python, made config: its keywords as overrides, a builder
function, a search-space dict, and arrays or ``tf.data`` pipelines checked and written where
the config reads them."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from packexp.errors import ConfigError

# What a dict given as the search space is called where the config names its choices.
DICT_CHOICE = "dict"


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
    return quoted(str(value))  # a string stays one: '123', 'true' and 'null' included


def quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_pipeline(data: Any) -> bool:
    """Whether ``data`` is a ``tf.data.Dataset`` (TensorFlow is not imported to ask)."""
    return any(c.__module__.startswith("tensorflow") and c.__name__ == "DatasetV2"
               for c in type(data).__mro__)


def pipelines_of(data: Any) -> tuple[Any, ...] | None:
    """``data`` as ``(train,)`` or ``(train, validation)`` ``tf.data`` datasets; None if it
    is not one of those."""
    if is_pipeline(data):
        return (data,)
    if (isinstance(data, Sequence) and not isinstance(data, str) and len(data) == 2
            and any(is_pipeline(d) for d in data)):
        if not all(is_pipeline(d) for d in data):
            raise ConfigError("data: give a tf.data.Dataset, or a (train, validation) pair "
                              "of them; one of the pair is not")
        return tuple(data)
    return None


def write_pipelines(cfg: DictConfig, pipelines: tuple[Any, ...]) -> None:
    """Writes the ``tf.data`` datasets once, as TFRecord shards where ``dataset.path`` (and
    ``dataset.val_path``) read them; a resumed run reads what its first session wrote."""
    from packexp.data import tfrecord

    folder = Path(cfg.dataset.path).parent
    if folder.exists() and not cfg.get("resume"):
        raise ConfigError(f"hydra.run.dir={folder.parent}: holds a run already; add "
                          "resume=True to continue it, or choose another run_dir")
    if cfg.get("resume") and folder.exists():
        return  # the data the run started with: a pipeline cannot be compared cheaply
    try:
        for pipeline, path in zip(pipelines, (cfg.dataset.path, cfg.dataset.val_path),
                                  strict=False):
            tfrecord.write(pipeline, Path(path))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # no half-written data
        raise


def arrays_of(data: Any) -> tuple[np.ndarray, ...]:
    """``data`` as ``(x, y)`` or ``(x_train, y_train, x_val, y_val)`` NumPy arrays."""
    if not isinstance(data, Sequence) or len(data) not in (2, 4):
        raise ConfigError(f"data: give a config name from conf/dataset/, (x, y) or (x_train, "
                          f"y_train, x_val, y_val); got {type(data).__name__}"
                          + (f" of {len(data)}" if isinstance(data, Sequence) else ""))
    try:
        arrays = [np.asarray(a) for a in data]
    except ValueError as e:  # ragged rows
        raise ConfigError(f"packexp.tune(data=...): {' '.join(str(e).split())}") from None
    # Labels from pandas (strings, categories) arrive as objects: as strings they can be
    # kept without pickling.
    return tuple(a.astype(str) if a.dtype == object and all(isinstance(v, str) for v in a.flat)
                 else a for a in arrays)


def use_builder(cfg: DictConfig, build: Callable[..., Any], args: Sequence[str]) -> None:
    """The composed config's model becomes ``build`` (``packexp.app.in_process``); a model key
    among the overrides ``args`` would be lost, and is refused."""
    from packexp.app import in_process

    refuse_lost_keys("model", args, "a builder function given as model takes no model "
                     "keys; bind its settings with functools.partial(build, key=value)")
    func = getattr(build, "func", build)
    node: dict[str, Any] = {"_target_": in_process.target(build), "_partial_": True}
    if (isinstance(build, functools.partial) and not build.args
            and not in_process.is_in_process(in_process.target(func))):
        # An importable function's partial: its settings go in the config, as YAML's would.
        node = {**build.keywords, "_target_": in_process.target(func), "_partial_": True}
    with open_dict(cfg):
        cfg.model = OmegaConf.create(node)
        cfg.hydra.runtime.choices.model = getattr(func, "__name__", type(func).__name__)


def refuse_lost_keys(group: str, args: Sequence[str], why: str) -> None:
    """Overrides of ``group``'s keys, which a node given in Python replaces, are refused."""
    lost = next((a for a in args if a.lstrip("+~").startswith(f"{group}.")), None)
    if lost is not None:
        raise ConfigError(f"{lost}: {why}")


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
        node = OmegaConf.create({"_target_": "packexp.space.SearchSpace",
                                 "_convert_": "all", "categorical": [], **spec})
    except Exception as e:
        raise ConfigError(f"search_space: {' '.join(str(e).split())}") from None
    with open_dict(cfg):
        cfg.search_space = node
        cfg.hydra.runtime.choices.search_space = DICT_CHOICE


def write_arrays(cfg: DictConfig, arrays: tuple[np.ndarray, ...]) -> None:
    """Checks ``arrays`` as ``dataset=arrays`` checks a file (one line naming ``data`` and
    the problem) and writes them to ``dataset.path``; a resumed run's file must hold the
    same arrays."""
    from packexp.config import instantiate
    from packexp.data.arrays import from_arrays

    d = cfg.dataset
    regression = instantiate(cfg.objective, "objective").regression  # objective.metrics too
    try:
        from_arrays(*arrays[:2], *arrays[2:], name="arrays", source="packexp.tune(data=...)",
                    val_fraction=d.val_fraction, standardize=d.standardize, seed=cfg.seed,
                    regression=regression, standardize_target=d.standardize_target)
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"dataset.{e}") from None  # a dataset key's value, as instantiate
    keys = ("x", "y", "x_val", "y_val")[:len(arrays)]
    path = Path(d.path)
    if not cfg.get("resume") and any(f.exists() for f in (path, path.parent / "journal.jsonl")):
        # a run's data is never written over, nor another run's directory written into
        raise ConfigError(f"hydra.run.dir={path.parent}: holds a run already; add "
                          "resume=True to continue it, or choose another run_dir")
    if cfg.get("resume") and path.exists():
        with np.load(path, allow_pickle=False) as kept:
            if set(kept.files) != set(keys) or not all(
                    np.array_equal(kept[k], a) for k, a in zip(keys, arrays, strict=True)):
                raise ConfigError(f"resume=true: data differs from the arrays the run in "
                                  f"{path.parent} started with ({path})")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **dict(zip(keys, arrays, strict=True)))
