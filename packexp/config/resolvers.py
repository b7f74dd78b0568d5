"""The config's resolvers, ``${default:}`` and ``${packexp_home:}``, and the ``ConfigError`` a
resolver raised brought out of OmegaConf's and Hydra's wrapping as one line."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from packexp.errors import ConfigError


def constructor_default(source: str = "", *, _parent_: DictConfig, _node_: Any) -> Any:
    """``${default:}`` in a config file: the default the node's ``_target_`` gives the key,
    read from its signature, so each default is written once, in the code (a tuple reads as
    a list). ``${default:a.b.f}`` reads ``f``'s instead: a model file names its builder so,
    and a builder of your own put in ``model._target_`` gets the same values as before."""
    key, where = _node_._key(), _node_._get_full_key(None)
    group = _parent_._get_full_key(None) or key
    source = source or _parent_.get("_target_")
    if source is None:
        raise ConfigError(f"{where}: ${{default:}} needs a _target_ beside it")
    from packexp.config.sources import UNKNOWN, source_default

    # Read from the target's source where its literals say it: resolving a config imports
    # no profile, dataset or model module (nor TensorFlow with it) for a default.
    default = source_default(str(source), str(key))
    if default is not UNKNOWN:
        return OmegaConf.create(list(default)) if isinstance(default, tuple) else default
    from hydra._internal.utils import _locate  # what instantiate imports with; logs nothing

    try:
        target = _locate(source)
    except Exception as e:
        raise ConfigError(unimportable(source, group, e.__cause__ or e)) from None
    try:
        parameter = inspect.signature(target).parameters.get(key)
    except (TypeError, ValueError):
        parameter = None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        raise ConfigError(f"{where}: ${{default:}}, but {source} has no default for {key}; "
                          f"set {where}=<value>")
    if isinstance(parameter.default, tuple):  # a config node, so it resolves in place too
        return OmegaConf.create(list(parameter.default))
    return parameter.default


@contextlib.contextmanager
def config_errors() -> Iterator[None]:
    """Re-raises a ``ConfigError`` that OmegaConf wrapped while resolving an interpolation
    (``${default:}``) as itself: one line naming the key."""
    try:
        yield
    except OmegaConfBaseException as e:
        if (config_error := config_error_in(e)) is not None:
            raise config_error from None
        raise


def config_error_in(error: BaseException) -> ConfigError | None:
    """The ``ConfigError`` behind ``error`` (a resolver's, which OmegaConf and Hydra wrap in
    their own exceptions), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConfigError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def unimportable(target: Any, group: str, cause: BaseException) -> str:
    """The one line for a ``_target_`` that cannot be imported: the key, the value, why."""
    reason = " ".join(f"{type(cause).__name__}: {cause}".split())
    top = str(target).split(".")[0]
    hint = ""
    if isinstance(cause, ModuleNotFoundError) and cause.name == top:
        hint = (f"; run python -m packexp where {top} is importable (from the folder that "
                "holds it, or with that folder on PYTHONPATH)")
    return f"{group}._target_={target!r}: cannot be imported ({reason}){hint}"


def register_resolvers() -> None:
    """Lets configs use ``${default:}`` and ``${packexp_home:name}`` (``files.home_path``);
    before Hydra resolves anything (``--cfg job --resolve``), and on importing this module."""
    from packexp.files import home_path

    OmegaConf.register_new_resolver("default", constructor_default, replace=True)
    OmegaConf.register_new_resolver("packexp_home", home_path, replace=True)


register_resolvers()
