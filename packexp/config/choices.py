"""What a job chose, as its records name it: each group's config file, the command line's
overrides, and the config as dotted keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig


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


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config to dotted keys: ``{"model": {"width": 64}}`` -> ``{"model.width": 64}``."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
