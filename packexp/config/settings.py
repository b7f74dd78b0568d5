"""The budget's and the pack's settings read from the config as the parts take them, each
bad value one line naming its key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packexp.errors import ConfigError
from packexp.runner.budget import Budget
from packexp.space.options import PackSettings
from packexp.surrogate import Surrogate


def budget_of(cfg: DictConfig) -> Budget:
    """The search's budget (``budget.time_s``, ``budget.trials``), checked: one line naming
    the key."""
    try:
        return Budget(**OmegaConf.to_container(cfg.get("budget") or {}, resolve=True))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"budget.{' '.join(str(e).split())}") from None


def surrogate_of(cfg: DictConfig) -> Surrogate:
    """How the search uses narrow stand-ins (``surrogate.scale``, ``surrogate.transfer``),
    checked: one line naming the key."""
    node = cfg.get("surrogate") or {}
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    unknown = sorted(set(values) - {"scale", "transfer", "readout_zero_init"})
    if unknown:
        raise ConfigError(f"surrogate.{unknown[0]}: no such setting (scale, transfer, "
                          "readout_zero_init)")
    try:
        return Surrogate(**values)
    except ValueError as e:
        raise ConfigError(str(e)) from None


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
