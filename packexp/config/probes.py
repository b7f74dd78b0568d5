"""The model and the optimizers probed before any training: each built with every value the
space gives them, and the model's output checked to be logits of the data's classes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from packexp.config.hparams import model_hparams
from packexp.errors import ConfigError
from packexp.space import SearchSpace
from packexp.space.dimensions import Choice


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
            raise ConfigError(f"{where}: {' '.join(str(e).split())}"
                              f"{sequences_hint(dataset, str(e))}") from None
        except Exception as e:  # a user's builder may fail in any way
            raise ConfigError(f"{where} with {model_hparams(hparams)}: "
                              f"{' '.join(f'{type(e).__name__}: {e}'.split())}") from None
        if i == 0:
            check_logits(model, dataset)
            built = model


def sequences_hint(dataset: Any, error: str) -> str:
    """Where a model of sequences (Keras's Conv1D, LSTM: ``expected ndim=3, found ndim=2``)
    was built for feature vectors: "; " and how the dataset gives sequences; else ""."""
    if len(dataset.input_shape) != 1 or not re.search(r"expected (min_)?ndim=3, found ndim=2",
                                                      error):
        return ""
    given = {"mnist1d": "add dataset.sequences=true for [40, 1]",
             "arrays": "give x as [n, steps, features] (x[..., None] for one feature per step)"}
    return (f"; the model takes sequences [steps, features]: "
            f"{given.get(dataset.name, 'choose data of sequences (docs/data.md, Sequences)')}")


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
