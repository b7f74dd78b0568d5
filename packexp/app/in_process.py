"""Builders handed to ``packexp.tune`` that no module can import: a notebook's, or one defined
in ``__main__`` or inside a function. ``packexp.tune`` keeps each here under a name, and the
config names it ``packexp.app.in_process.<name>``, where Hydra finds it as it finds any
``_target_``: in this process only, so such a builder trains under ``executor=local`` and
not on Ray workers (README, "From Python")."""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from collections.abc import Callable
from typing import Any

PREFIX = f"{__name__}."

_kept: dict[str, Callable[..., Any]] = {}


def target(build: Callable[..., Any]) -> str:
    """The ``_target_`` that names ``build``: its dotted path where its module gives it
    back, else a name here made of its own name and a digest of its source, so the same
    code keeps the same name (and a search's calibration and resume still match) from one
    call, or kernel, to the next."""
    module, qualname = getattr(build, "__module__", None), getattr(build, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname:
        try:
            found: Any = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            found = None
        if found is build:
            return f"{module}.{qualname}"
    func = getattr(build, "func", build)  # a functools.partial's function names it
    name = f"{_identifier(getattr(func, '__name__', type(func).__name__))}_{_digest(build)}"
    _kept[name] = build
    return PREFIX + name


def is_in_process(target_path: str) -> bool:
    return str(target_path).startswith(PREFIX)


def __getattr__(name: str) -> Callable[..., Any]:
    try:
        return _kept[name]
    except KeyError:
        raise AttributeError(f"{PREFIX}{name}: no builder of that name was handed to "
                             "packexp.tune in this process") from None


def _digest(build: Callable[..., Any]) -> str:
    """Of the source (a partial's: its function's, and the arguments it binds)."""
    if isinstance(build, functools.partial):
        source = _source(build.func) + repr((build.args, sorted(build.keywords.items())))
    else:
        source = _source(build)
    return hashlib.sha1(source.encode()).hexdigest()[:10]


def _source(build: Callable[..., Any]) -> str:
    """Its source text and what it closes over and defaults to (``make(16)`` and
    ``make(512)`` differ); another callable, by its class's source."""
    if not inspect.isfunction(build):
        try:
            return inspect.getsource(type(build)) + _text(vars(build))
        except (OSError, TypeError):
            return type(build).__qualname__ + _text(vars(build))
    try:
        text = inspect.getsource(build)
    except (OSError, TypeError):
        text = repr((build.__code__.co_code, build.__code__.co_consts))
    cells = [c.cell_contents for c in build.__closure__ or ()]
    return text + _text([cells, build.__defaults__, build.__kwdefaults__])


def _text(value: Any) -> str:
    """``value`` as text that is the same in every process: plain values and containers
    as themselves, anything else by its type and name (never by its address)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_text(k)}:{_text(v)}" for k, v in value.items()) + "}"
    return f"<{type(value).__qualname__} {getattr(value, '__qualname__', '')}>"


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")
    return cleaned if cleaned and not cleaned[0].isdigit() else f"builder_{cleaned}"
