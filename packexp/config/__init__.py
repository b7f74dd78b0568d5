"""The composed config, read and checked: components instantiated, settings turned into the
arguments the parts take, and every bad value stopped with one line naming its key."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from packexp.errors import ConfigError, positive_int
from packexp.objectives import METRICS, Head, Objective
from packexp.runner.budget import Budget
from packexp.space import SearchSpace
from packexp.space.dimensions import Choice, IntRange
from packexp.space.options import LR_SCHEDULES, OPTIMIZERS, PackSettings

SPACE_TARGET = "packexp.space.SearchSpace"  # what a search space file without _target_ is


def constructor_default(source: str = "", *, _parent_: DictConfig, _node_: Any) -> Any:
    """``${default:}`` in a config file: the default the node's ``_target_`` gives the key,
    read from its signature, so each default is written once, in the code (a tuple reads as
    a list). ``${default:a.b.f}`` reads ``f``'s instead: a model file names its builder so,
    and a builder of your own put in ``model._target_`` gets the same values as before."""
    key, where = _node_._key(), _node_._get_full_key(None)
    group = _parent_._get_full_key(None) or key
    source = source or _parent_.get("_target_")
    if source is None:
        raise ConfigError(f"{where}: ${{default:}} needs a _target_ beside it")
    from packexp.config.sources import UNKNOWN, source_default

    # Read from the target's source where its literals say it: resolving a config imports
    # no profile, dataset or model module (nor TensorFlow with it) for a default.
    default = source_default(str(source), str(key))
    if default is not UNKNOWN:
        return OmegaConf.create(list(default)) if isinstance(default, tuple) else default
    from hydra._internal.utils import _locate  # what instantiate imports with; logs nothing

    try:
        target = _locate(source)
    except Exception as e:
        raise ConfigError(unimportable(source, group, e.__cause__ or e)) from None
    try:
        parameter = inspect.signature(target).parameters.get(key)
    except (TypeError, ValueError):
        parameter = None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        raise ConfigError(f"{where}: ${{default:}}, but {source} has no default for {key}; "
                          f"set {where}=<value>")
    if isinstance(parameter.default, tuple):  # a config node, so it resolves in place too
        return OmegaConf.create(list(parameter.default))
    return parameter.default


@contextlib.contextmanager
def config_errors() -> Iterator[None]:
    """Re-raises a ``ConfigError`` that OmegaConf wrapped while resolving an interpolation
    (``${default:}``) as itself: one line naming the key."""
    try:
        yield
    except OmegaConfBaseException as e:
        if (config_error := config_error_in(e)) is not None:
            raise config_error from None
        raise


def config_error_in(error: BaseException) -> ConfigError | None:
    """The ``ConfigError`` behind ``error`` (a resolver's, which OmegaConf and Hydra wrap in
    their own exceptions), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConfigError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def register_resolvers() -> None:
    """Lets configs use ``${default:}`` and ``${packexp_home:name}`` (``files.home_path``);
    before Hydra resolves anything (``--cfg job --resolve``), and on importing this module."""
    from packexp.files import home_path

    OmegaConf.register_new_resolver("default", constructor_default, replace=True)
    OmegaConf.register_new_resolver("packexp_home", home_path, replace=True)


register_resolvers()

REQUIRED_HPARAMS = ("batch_size", "optimizer", "learning_rate")
from packexp.config.preprocessing import KEYS as PREPROCESS_KEYS  # noqa: E402

# Hyper-parameters the pack engine consumes, with the optimizers' own arguments
# (``optimizer_args``). Every other one a search space lists belongs to the model: its builder
# reads it from ``hparams``, and it is part of a member's structure.
TRAINING_HPARAMS = (*REQUIRED_HPARAMS, *PREPROCESS_KEYS, "lr_schedule")


def model_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The model's own hyper-parameters among ``hparams``: not ``TRAINING_HPARAMS`` and not
    an argument of any optimizer (imports Keras)."""
    from packexp.packing.optimizers import optimizer_args

    optimizer = set().union(*map(optimizer_args, OPTIMIZERS))
    return {k: v for k, v in hparams.items()
            if k not in TRAINING_HPARAMS and k not in optimizer}


def fit_dataset_to_model(cfg: DictConfig) -> None:
    """Resolves ``dataset.images: auto``: images for a model that needs them, else features.

    It changes ``cfg`` itself, before anything reads it, so the journal, the MLflow params
    and profile workers all see the value the run used.
    """
    dataset = cfg.get("dataset")
    if dataset is None or dataset.get("images") != "auto":
        return
    from packexp.models import needs_images

    dataset.images = needs_images(instantiate(model_node(cfg), "model"))


def dataset_source(cfg: DictConfig) -> str | None:
    """The file or folder the dataset is read from (``dataset.path``); None for data in code."""
    path = cfg.dataset.get("path")
    return os.path.abspath(os.path.expanduser(str(path))) if path else None


HEAD_KEYS = ("loss", "metrics")  # the model's own loss and metrics (``objectives.Head``)


def model_node(cfg: DictConfig) -> DictConfig:
    """``cfg.model`` without its own loss and metrics: the builder's node."""
    keys = [k for k in cfg.model if k not in HEAD_KEYS]
    return OmegaConf.masked_copy(cfg.model, keys)


def head_of(cfg: DictConfig, objective: Objective) -> Head:
    """The model's own loss and metrics (``model.loss``, ``model.metrics``), checked, and
    the objective's metrics checked against what the search measures."""
    node = OmegaConf.to_container(cfg.model, resolve=True)
    try:
        head = Head(node.get("loss"), tuple(node.get("metrics") or ()))
    except ValueError as e:
        raise ConfigError(f"model.{' '.join(str(e).split())}") from None
    known = [*METRICS, *head.names]
    for name, _ in objective.goals:
        if name not in known:
            raise ConfigError(f"objective.metric={name}: not measured by this search; the "
                              f"model's own metrics are {head.names or 'none'} "
                              "(model.metrics=[{_target_: ..., name: ...}])")
    return head


def load_dataset(cfg: DictConfig, objective: Objective) -> Any:
    """The dataset ``cfg.dataset`` names, read for ``objective``: a regression's targets as
    real values, where the dataset's loader takes them (``regression``: a user's table or
    arrays); a regression of class labels is refused in one line."""
    if not objective.regression:
        return instantiate(cfg.dataset, "dataset")
    try:
        loader = hydra.utils.get_method(str(cfg.dataset.get("_target_")))
    except Exception:
        return instantiate(cfg.dataset, "dataset")
    if "regression" not in inspect.signature(loader).parameters:
        raise ConfigError(f"objective.metric={objective.metric}: a regression needs real-valued "
                          f"targets, and dataset={component_name(cfg, 'dataset')} has classes; "
                          "use dataset=table or dataset=arrays")
    return instantiate(cfg.dataset, "dataset", regression=True)


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


def task_overrides() -> list[str]:
    """The job's command-line overrides but ``resume``; none outside a Hydra app."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return without_keys(HydraConfig.get().overrides.task, ("resume",))
    except ValueError:
        return []


def without_keys(overrides: Sequence[str], keys: Sequence[str]) -> list[str]:
    """``overrides`` but those that set one of ``keys`` (``+key=``, ``~key`` included)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return [text for text, o in zip(overrides, parsed, strict=True)
            if o.key_or_group not in keys]


def instantiate(node: DictConfig, group: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` whose errors become one line naming the config group."""
    if node is None or "_target_" not in node:
        raise ConfigError(f"{group}: no _target_; choose a file from conf/{group}/")
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except (InstantiationException, OmegaConfBaseException) as e:
        if (config_error := config_error_in(e)) is not None:
            raise config_error from None
        cause = e.__cause__ or e
        if str(e).startswith("Error locating target"):
            raise ConfigError(unimportable(node._target_, group, cause.__cause__ or cause)
                              ) from None
        message = str(cause)
        if isinstance(cause, ValueError) and "=" in message.split(":")[0]:
            raise ConfigError(f"{group}.{message}") from None
        raise ConfigError(f"{group}: {type(cause).__name__}: {message}") from None


def space_node(node: DictConfig) -> DictConfig:
    """A search space's config as Hydra instantiates it: a file of ``params`` (and
    ``categorical``) alone is a ``SearchSpace``, so ``_target_`` and ``_convert_`` default."""
    if node is None or "_target_" in node:
        return node
    if "params" not in node:
        keys = ", ".join(map(str, node)) or "no keys"
        raise ConfigError(f"search_space: no params (it has {keys}); write params: "
                          "{name: [values], ...} as conf/search_space/table3.yaml does")
    return OmegaConf.merge({"_target_": SPACE_TARGET, "_convert_": "all"}, node)


def unimportable(target: Any, group: str, cause: BaseException) -> str:
    """The one line for a ``_target_`` that cannot be imported: the key, the value, why."""
    reason = " ".join(f"{type(cause).__name__}: {cause}".split())
    top = str(target).split(".")[0]
    hint = ""
    if isinstance(cause, ModuleNotFoundError) and cause.name == top:
        hint = (f"; run python -m packexp where {top} is importable (from the folder that "
                "holds it, or with that folder on PYTHONPATH)")
    return f"{group}._target_={target!r}: cannot be imported ({reason}){hint}"


def check_space(space: SearchSpace) -> None:
    """The hyper-parameters training reads, each of a kind and with values it can use.

    ``batch_size`` is discrete (a value list or an int range: calibration and the
    ``batch_size`` strategy need its values), ``optimizer``, ``activation`` and the
    preprocessing keys are value lists, and ``learning_rate`` may be any kind above 0.
    """
    missing = [k for k in REQUIRED_HPARAMS if k not in space.dims]
    if missing:
        raise ConfigError(f"search_space.params: missing {missing}; training needs each of "
                          f"{list(REQUIRED_HPARAMS)}")
    for name, kinds in [("batch_size", (Choice, IntRange)), ("optimizer", (Choice,)),
                        ("activation", (Choice,)), ("lr_schedule", (Choice,)),
                        *((k, (Choice,)) for k in PREPROCESS_KEYS)]:
        dim = space.dims.get(name)
        if dim is not None and not isinstance(dim, kinds):
            allowed = " or ".join(f"kind={k.kind}" for k in kinds)
            raise ConfigError(f"search_space.params.{name}: kind={dim.kind} is not allowed; "
                              f"it must be {allowed} (a plain list is kind=choice)")
    batch_size = space.dims["batch_size"]
    for b in batch_size.values if isinstance(batch_size, Choice) else [batch_size.low]:
        positive_int("search_space.params.batch_size", b, error=ConfigError)
    for o in space.params["optimizer"]:
        if o not in OPTIMIZERS:
            raise ConfigError(f"search_space.params.optimizer: {o!r} is not one of "
                              f"{list(OPTIMIZERS)}")
    learning_rate = space.dims["learning_rate"]
    if isinstance(learning_rate, Choice):
        for lr in learning_rate.values:
            if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
                raise ConfigError(f"search_space.params.learning_rate: {lr!r} is not a "
                                  "positive number")
    elif not learning_rate.low > 0:
        raise ConfigError(f"search_space.params.learning_rate: low={learning_rate.low} is not "
                          "a positive number")
    for schedule in space.params.get("lr_schedule", ()):
        if schedule not in LR_SCHEDULES:
            raise ConfigError(f"search_space.params.lr_schedule: {schedule!r} is not one of "
                              f"{list(LR_SCHEDULES)}")


def check_search(cfg: DictConfig) -> tuple[SearchSpace, Any, Any, Objective]:
    """A search's settings that need no TensorFlow, checked: its space, scheduler, strategy,
    objective and pack settings (``task=tune`` and ``task=plan``). ``python -m packexp``
    checks them before TensorFlow loads, so a bad value is reported at once.

    Returns:
        The search space, the scheduler, the strategy and the objective.
    """
    space: SearchSpace = instantiate(space_node(cfg.search_space), "search_space")
    check_space(space)
    scheduler = instantiate(cfg.scheduler, "scheduler")
    scheduler.check_space(space)
    scheduler.check_schedule()
    strategy = instantiate(cfg.strategy, "strategy")
    objective = instantiate(cfg.objective, "objective")
    scheduler.check_objective(objective)
    head_of(cfg, objective)
    budget_of(cfg)
    member_cap(cfg.pack.max_members)
    pack_settings(cfg.pack)
    reuse_setting(cfg.pack)
    return space, scheduler, strategy, objective


def probe_optimizers(space: SearchSpace) -> None:
    """Builds each optimizer with each value of each of its arguments the space sets (weight
    decay, momentum, beta values, ...), so a bad value fails before any training."""
    import keras

    from packexp.packing.optimizers import make_optimizer, optimizer_args

    for name in space.params["optimizer"]:
        for arg in sorted(optimizer_args(name) & set(space.dims)):
            dim = space.dims[arg]  # a list's values, a range's bounds
            for value in dim.values if isinstance(dim, Choice) else (dim.low, dim.high):
                if value is not None and not isinstance(value, int | float):
                    raise ConfigError(f"search_space.params.{arg}: {value!r} is not a number "
                                      f"(an argument of optimizer {name})")
                try:  # Keras checks few arguments when built: one step on one weight
                    weight = keras.Variable([1.0])
                    make_optimizer(name, 0.01, {arg: value}).apply([keras.ops.ones([1])],
                                                                   [weight])
                except (ValueError, TypeError) as e:
                    raise ConfigError(f"search_space.params.{arg}: {value!r} does not suit "
                                      f"optimizer {name}: {e}") from None


def probe_model(build_model: Callable, dataset: Any, space: SearchSpace) -> None:
    """Builds the model for every value of each of its hyper-parameters (a range's bounds;
    the others at the space's first configuration), and each optimizer with the space's
    arguments, so a bad value fails before any training; the first build must map one input
    to logits ``[batch, num_classes]``. A hyper-parameter the model takes at run time (its
    builder's ``RUNTIME_HPARAMS``, such as the activation) is set on the first build instead
    of building again."""
    from packexp.models import runtime_hparams
    from packexp.models.activation import set_activation

    probe_optimizers(space)
    first = space.first
    runtime = set(runtime_hparams(build_model))
    values = {k: dim.values if isinstance(dim, Choice) else (dim.low, dim.high)
              for k, dim in space.dims.items()}
    variants = [first] + [{**first, k: v} for k, vs in model_hparams(values).items()
                          for v in vs if v != first.get(k)]
    where = f"model: cannot build for {dataset.name} {list(dataset.input_shape)}"
    built = None  # the first configuration's model
    for i, hparams in enumerate(variants):
        changed = {k: v for k, v in hparams.items() if v != first.get(k)}
        try:
            if built is not None and changed and set(changed) <= runtime:
                set_activation(built, changed)
                continue
            model = build_model(dataset.input_shape, dataset.num_classes, hparams)
        except ValueError as e:
            raise ConfigError(f"{where}: {' '.join(str(e).split())}") from None
        except Exception as e:  # a user's builder may fail in any way
            raise ConfigError(f"{where} with {model_hparams(hparams)}: "
                              f"{' '.join(f'{type(e).__name__}: {e}'.split())}") from None
        if i == 0:
            check_logits(model, dataset)
            built = model


def check_logits(model: Any, dataset: Any) -> None:
    """A model must take one batch of the data's examples and return one tensor of logits."""
    import numpy as np

    where = f"model: on {dataset.name} {list(dataset.input_shape)}"
    try:
        out = model(np.zeros((2, *dataset.input_shape), np.float32), training=False)
    except Exception as e:
        raise ConfigError(f"{where}: cannot call the model on one input "
                          f"({' '.join(f'{type(e).__name__}: {e}'.split())}); packexp trains "
                          "classifiers of one input") from None
    shape = tuple(getattr(out, "shape", ()))
    if shape != (2, dataset.num_classes):
        got = f"{type(out).__name__} of {len(out)}" if isinstance(out, list | tuple | dict) \
            else f"shape {list(shape)}"
        raise ConfigError(f"{where}: the model returns {got} for a batch of 2; it must return "
                          f"logits [batch, {dataset.num_classes}]")


def budget_of(cfg: DictConfig) -> Budget:
    """The search's budget (``budget.time_s``, ``budget.trials``), checked: one line naming
    the key."""
    try:
        return Budget(**OmegaConf.to_container(cfg.get("budget") or {}, resolve=True))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"budget.{' '.join(str(e).split())}") from None


def reuse_setting(pack: DictConfig) -> int:
    """Packs kept for reuse (``pack.reuse``), checked."""
    return _checked_pack(pack).reuse


def batch_bucket(space: Any) -> int:
    """The search's largest batch size: the one batch shape a compiled program is built for
    (``Pack``'s ``batch_bucket``)."""
    return int(max(space.dims["batch_size"].values))


def member_cap(max_members: Any) -> int:
    """``pack.max_members``, checked."""
    return _checked_pack({"max_members": max_members}).max_members


def pack_settings(pack: DictConfig) -> dict[str, Any]:
    """``Pack`` keyword arguments from ``cfg.pack``, checked."""
    return _checked_pack(pack).pack_options


def _checked_pack(pack: Mapping[str, Any]) -> PackSettings:
    """``cfg.pack`` as ``PackSettings`` (a key it lacks keeps its default); a bad value
    stops with one line naming its key."""
    try:
        return PackSettings.from_config(pack)
    except ValueError as e:
        raise ConfigError(f"pack.{e}") from None


def check_batch_sizes(space: SearchSpace, dataset: Any) -> None:
    """Every batch size fits in the training split: a small dataset of a user's stops before
    anything is written, not at its first pack."""
    sizes = space.params.get("batch_size")
    train_size = dataset.train_size
    if sizes and max(sizes) > train_size:
        raise ConfigError(f"search_space.params.batch_size: {max(sizes)} is more than the "
                          f"{train_size} training examples of dataset {dataset.name}; give "
                          "batch sizes of at most that, or more data")


def component_name(cfg: DictConfig, group: str) -> str:
    """The config file chosen for ``group``; outside a Hydra app, the keras.applications
    class it names (lower case) or its module's name."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.choices[group])
    except (ValueError, KeyError):
        node = cfg[group]
        if "application" in node:  # one module builds every keras.applications model
            return str(node.application).lower()
        return str(node["_target_"]).rsplit(".", 2)[-2]


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config to dotted keys: ``{"model": {"width": 64}}`` -> ``{"model.width": 64}``."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
