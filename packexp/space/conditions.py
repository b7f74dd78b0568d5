"""A search space's conditions (``when:``): each read and checked against the parents it names,
and the hyper-parameters put in an order where every parent comes before its children."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packexp.errors import ConfigError
from packexp.space.dimensions import Choice, Dimension

#: Every trial has these: none may be conditional.
REQUIRED = ("batch_size", "learning_rate", "optimizer")


def condition_of(name: str, when: Any, dims: Mapping[str, Dimension]) -> dict[str, tuple]:
    """``when`` of ``name`` checked: each parent a choice of the space, each value one of
    its values."""
    where = f"search_space.params.{name}.when"
    if name in REQUIRED:
        raise ConfigError(f"{where}: every trial needs {name}; it cannot be conditional")
    if not isinstance(when, Mapping) or not when:
        raise ConfigError(f"{where}={when!r}: must map a parent hyper-parameter to its "
                          "values, e.g. {optimizer: [sgd]}")
    out = {}
    for parent, values in when.items():
        if parent not in dims or parent == name:
            raise ConfigError(f"{where}: names {parent!r}, which is not another "
                              f"hyper-parameter of the space ({', '.join(dims)})")
        dim = dims[parent]
        if not isinstance(dim, Choice):
            raise ConfigError(f"{where}.{parent}: {parent} is a kind={dim.kind} range; a "
                              "condition names values of a choice")
        values = tuple(values) if isinstance(values, Sequence) and not isinstance(
            values, str) else (values,)
        unknown = [v for v in values if v not in dim.values]
        if unknown or not values:
            raise ConfigError(f"{where}.{parent}: {unknown[0] if unknown else values!r} is "
                              f"not one of {parent}'s values {list(dim.values)}")
        out[parent] = values
    return out


def in_order(conditions: Mapping[str, Mapping[str, Any]], names: list[str]) -> list[str]:
    """``names`` with every parent before its children (else in config order); a cycle of
    conditions is one line naming it."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            cycle = [*visiting[visiting.index(name):], name]
            raise ConfigError("search_space.params: the conditions form a cycle: "
                              f"{' -> '.join(cycle)} (each one's when names the next)")
        visiting.append(name)
        for parent in conditions.get(name, {}):
            visit(parent)
        visiting.pop()
        order.append(name)

    for name in names:
        visit(name)
    return order
