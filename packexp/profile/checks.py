"""Checks of a profile's settings: lists of whole numbers and batch sizes (single values:
``packexp.errors``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packexp.data import Dataset
from packexp.errors import ConfigError


def int_list(key: str, values: Any, minimum: int = 1) -> tuple[int, ...]:
    """A non-empty list of integers >= ``minimum``, sorted and without repeats."""
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, str) or not isinstance(values, Sequence) or not values or any(
            isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values):
        raise ValueError(f"{key}={values!r}: must be a non-empty list of integers >= {minimum}")
    return tuple(sorted(set(values)))


def check_batch_sizes(batch_sizes: Sequence[int], dataset: Dataset) -> None:
    """Raises ConfigError where a batch size is larger than ``dataset``'s training set."""
    n_train = dataset.x_train.shape[0]
    if max(batch_sizes) > n_train:
        raise ConfigError(f"profile.batch_sizes={list(batch_sizes)}: more than the "
                          f"{n_train} training examples")
