"""The checkout and its configs (``ROOT``, ``CONF_DIR``), and the config a test composes
(``compose_config``)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_dir

from packexp.config import register_resolvers
from packexp.files import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig

# The checkout: the working directory of the commands tests start, and its docs/, scripts/,
# examples/ (a wheel has none of them).
ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = conf_dir()


def compose_config(overrides: list[str] | None = None, *,
                   strategy: str | None = "knn") -> DictConfig:
    """The composed config under ``overrides``: a test's own copy, free to change. Memory
    probes are kept in the run directory only, unless ``overrides`` set ``device.probe_dir``.

    Unless ``overrides`` choose a strategy, tests run ``strategy`` (knn): it packs on every
    device, so the pack engine is exercised wherever the suite runs, where the default
    (cost) may plan only singles and first measures a calibration. ``strategy=None``
    composes the true default."""
    overrides = list(overrides or ())
    if strategy and not any(o.startswith("strategy=") for o in overrides):
        overrides.append(f"strategy={strategy}")
    if not any(o.startswith("device.probe_dir=") for o in overrides):
        overrides.append("device.probe_dir=null")  # no test reads a probe another kept
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    # A composition takes ~0.2 s and tests repeat override lists; callers get copies.
    register_resolvers()  # ${default:}, as python -m packexp and packexp.tune register it
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
