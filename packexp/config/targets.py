"""A config node's ``_target_`` instantiated, its errors one line naming the group, and the
nodes the parts are built from: the search space's, the model's, the dataset's."""

from __future__ import annotations

import inspect
import os
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from packexp.config.choices import component_name
from packexp.config.resolvers import config_error_in, unimportable
from packexp.errors import ConfigError
from packexp.objectives import Objective

SPACE_TARGET = "packexp.space.SearchSpace"  # what a search space file without _target_ is
HEAD_KEYS = ("loss", "metrics")  # the model's own loss and metrics (``objectives.Head``)


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


def model_node(cfg: DictConfig) -> DictConfig:
    """``cfg.model`` without its own loss and metrics: the builder's node."""
    keys = [k for k in cfg.model if k not in HEAD_KEYS]
    return OmegaConf.masked_copy(cfg.model, keys)


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


def dataset_source(cfg: DictConfig) -> str | None:
    """The file or folder the dataset is read from (``dataset.path``); None for data in code."""
    path = cfg.dataset.get("path")
    return os.path.abspath(os.path.expanduser(str(path))) if path else None
