"""Packing strategies: one module per strategy, named as its config file."""

from packexp.strategies.base import Capacity, Strategy, greedy_fill

__all__ = ["Capacity", "Strategy", "greedy_fill"]
