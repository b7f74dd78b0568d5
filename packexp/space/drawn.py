"""The configurations a search has drawn, in order, with what tells them apart in a space kept
as each is added: a draw that must not repeat one asks a set, not a pass over every draw."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload


class Drawn(Sequence[Mapping[str, Any]]):
    """Drawn configurations (a sequence, as ``sample``'s ``drawn``), each keyed once per key
    function asked of it (``keys``)."""

    def __init__(self, configs: Iterable[Mapping[str, Any]] = ()) -> None:
        self._configs: list[Mapping[str, Any]] = list(configs)
        # name -> (keys, [configurations keyed], the key function: it holds its space, so the
        # space's id in the name is not another's)
        self._keys: dict[Any, tuple[set[Any], list[int], Callable]] = {}

    def add(self, configs: Iterable[Mapping[str, Any]]) -> None:
        self._configs.extend(configs)

    def keys(self, name: Any, key: Callable[[Mapping[str, Any]], Any]) -> set[Any]:
        """``key`` of every configuration, as a set (None left out), kept under ``name`` (the
        space and what ``key`` is); each configuration is keyed once. Do not change it."""
        keys, counted, _ = self._keys.setdefault(name, (set(), [0], key))
        for config in self._configs[counted[0]:]:
            keys.add(key(config))
        counted[0] = len(self._configs)
        keys.discard(None)
        return keys

    def __len__(self) -> int:
        return len(self._configs)

    @overload
    def __getitem__(self, i: int) -> Mapping[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Mapping[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> Any:
        return self._configs[i]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self._configs)


def drawn_keys(drawn: Iterable[Mapping[str, Any]], name: Any,
               key: Callable[[Mapping[str, Any]], Any]) -> set[Any]:
    """The set of ``key`` over ``drawn`` (None left out): kept as draws come where ``drawn`` is
    a ``Drawn``, else made now. The caller must not change it."""
    if isinstance(drawn, Drawn):
        return drawn.keys(name, key)
    return {k for k in map(key, drawn) if k is not None}
