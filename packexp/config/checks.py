"""The search's config checked before TensorFlow loads (its space's training
hyper-parameters, its model's head, scheduler and settings), and the model and dataset
checked against each other once read; each bad value one line naming its key."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packexp.config.choices import component_name
from packexp.config.hparams import PREPROCESS_KEYS, REQUIRED_HPARAMS
from packexp.config.settings import (
    budget_of,
    member_cap,
    pack_settings,
    reuse_setting,
    surrogate_of,
)
from packexp.config.targets import instantiate, space_node
from packexp.errors import ConfigError, positive_int
from packexp.objectives import METRICS, Head, Objective
from packexp.space import SearchSpace
from packexp.space.dimensions import Choice, IntRange
from packexp.space.options import LR_SCHEDULES, OPTIMIZERS


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
    surrogate = surrogate_of(cfg)
    if surrogate.on:  # the search over stand-ins, then its best at full width
        from packexp.surrogate.transfer import Transfer

        scheduler = Transfer(scheduler, surrogate.transfer)
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


def check_batch_sizes(space: SearchSpace, dataset: Any) -> None:
    """Every batch size fits in the training split: a small dataset of a user's stops before
    anything is written, not at its first pack."""
    sizes = space.params.get("batch_size")
    train_size = dataset.train_size
    if sizes and max(sizes) > train_size:
        raise ConfigError(f"search_space.params.batch_size: {max(sizes)} is more than the "
                          f"{train_size} training examples of dataset {dataset.name}; give "
                          "batch sizes of at most that, or more data")
