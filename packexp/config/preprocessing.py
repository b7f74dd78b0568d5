"""The config's preprocessing (``cfg.preprocess``, and a search space's same-named values):
each trial's settings and their check against the data, without TensorFlow."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from packexp.errors import ConfigError, flag
from packexp.packing.preprocessing import check_preprocessing as check_values
from packexp.space import SearchSpace, Trial

KEYS = ("mean", "std", "crop_padding", "flip")


def preprocessing_for(preprocess: DictConfig, trial: Trial | None = None) -> Any:
    """The trial's ``Preprocessing``: ``cfg.preprocess``, overridden by same-named hparams."""
    from packexp.packing.data import Preprocessing

    return Preprocessing(**preprocessing_values(preprocess, trial))


def preprocessing_values(preprocess: DictConfig, trial: Trial | None = None) -> dict[str, Any]:
    """``Preprocessing``'s settings for ``trial`` (``preprocessing_for``), without TensorFlow."""
    values = {k: preprocess.get(k) for k in KEYS}
    if trial is not None:
        values.update({k: v for k, v in trial.hparams.items() if k in KEYS})
    for key in ("mean", "std"):
        if values[key] is not None:
            values[key] = tuple(float(v) for v in values[key])
    return {"mean": values["mean"], "std": values["std"],
            "crop_padding": int(values["crop_padding"] or 0),
            "flip": values["flip"] is not None and flag("flip", values["flip"])}


def check_preprocessing(preprocess: DictConfig, space: SearchSpace,
                        input_shape: tuple[int, ...]) -> None:
    """Every preprocessing the search can produce must apply to the data."""
    variants = [{}] + [{k: v} for k in KEYS if k in space.params
                       for v in space.params[k]]
    for variant in variants:
        trial = Trial("check", variant, ())
        try:
            check_values(**preprocessing_values(preprocess, trial), input_shape=input_shape)
        except (TypeError, ValueError) as e:
            where = "search_space.params" if variant else "preprocess"
            raise ConfigError(f"{where}.{e}") from None
