"""Packing strategies: one module per strategy, named as its config file."""

from packexp.strategies.base import (
    Capacity,
    Device,
    Planned,
    RungContext,
    Strategy,
    WeighsCosts,
    check_fits,
    check_partition,
    greedy_fill,
)

__all__ = ["Capacity", "Device", "Planned", "RungContext", "Strategy", "WeighsCosts",
           "check_fits", "check_partition", "greedy_fill"]
