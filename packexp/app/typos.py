"""A typo in an override, a key (``scheduler.r=9``) or a config group's option
(``objective=regresion``), refused in packexp's one line naming the closest valid name, exit
2, instead of Hydra's report of several lines and exit 1."""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from hydra.errors import ConfigCompositionException, MissingConfigException

from packexp.errors import refuse


@contextlib.contextmanager
def typos_refused() -> Iterator[None]:
    """In the block, a config Hydra cannot compose for a typo in an override ends the
    command with ``typo_line``'s line (exit 2): in a run, a sweep, ``--help`` and
    ``--cfg`` alike, as each composes through Hydra's config loader. Other composition
    errors stay Hydra's."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import get_args_parser

    load = ConfigLoaderImpl.load_configuration
    # As typed: a sweep's job is composed with one value of each swept override.
    typed = get_args_parser().parse_known_intermixed_args(sys.argv[1:])[0].overrides

    def loading(self: Any, config_name: str | None, overrides: list[str], *args: Any,
                **kwargs: Any) -> Any:
        try:
            return load(self, config_name, overrides, *args, **kwargs)
        except ConfigCompositionException as e:
            if (line := typo_line(e, [*typed, *overrides])) is None:
                raise
            refuse(line)

    ConfigLoaderImpl.load_configuration = loading  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = load  # type: ignore[method-assign]


def typo_line(error: ConfigCompositionException, overrides: Sequence[str]) -> str | None:
    """The line for ``error``, Hydra's failure to compose with ``overrides`` (the first that
    fits is named), where it is a key that is not in the config or an option that is not in
    its group; None otherwise.

    Returns:
        ``<override>: <what is missing>; did you mean <the closest valid one>?``, or the
        valid ones where none is close.
    """
    if isinstance(error, MissingConfigException):
        return _option_line(error, overrides)
    return _key_line(error, overrides)


def closest(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate most like ``name`` (difflib, case ignored), or None where none is."""
    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[found[0]] if found else None


def _option_line(error: MissingConfigException, overrides: Sequence[str]) -> str | None:
    missing, options = error.missing_cfg_file, error.options
    if not missing or "/" not in missing or options is None:
        return None  # the primary config itself: Hydra's report says where it looked
    group, _, option = missing.rpartition("/")
    override = next((o.input_line for o in _parsed(overrides)
                     if _group_of(o.key_or_group) == group
                     and option in map(str, _values(o))), None)
    where = override or _named_in(str(error)) or group
    near = closest(option, options)
    hint = (f"did you mean {group}={near}?" if near else
            f"its options are {', '.join(options)}" if options else "it has no options")
    return f"{where}: no option {option} in config group {group}; {hint}"


def _key_line(error: ConfigCompositionException, overrides: Sequence[str]) -> str | None:
    cause = error.__cause__
    named = re.match(r"Could not override '([^']+)'", str(error))
    full_key = getattr(cause, "full_key", None)
    parent = getattr(cause, "parent_node", None)
    if named is None or not full_key or parent is None or "not in struct" not in str(cause):
        return None
    key = named.group(1)
    override = next((o for o in _parsed(overrides) if o.key_or_group == key), None)
    where = override.input_line if override is not None else key
    missing = str(full_key).rpartition(".")[2]
    above = str(full_key).rpartition(".")[0]
    keys = [str(k) for k in parent if not (above == "" and k == "hydra")]
    near = closest(missing, keys)
    place = f"in {above}" if above else "in the config"
    if near is not None:
        fixed = f"{above}.{near}" if above else near
        suggestion = fixed + key[len(str(full_key)):]
        if override is not None:
            suggestion += "=" + override.input_line.partition("=")[2]
        return f"{where}: no key {missing} {place}; did you mean {suggestion}?"
    listed = (f" (its keys: {', '.join(keys)})" if above and keys else
              "" if above else " (python -m packexp --help lists them)")
    return f"{where}: no key {missing} {place}{listed}; +{where.lstrip('+')} adds one"


def _parsed(overrides: Sequence[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # a line Hydra cannot parse has its own error
        return []


def _values(override: Any) -> list[Any]:
    if override.is_sweep_override():
        with contextlib.suppress(Exception):
            return list(override.sweep_string_iterator())
    return [override.value()]


def _group_of(key_or_group: str) -> str:
    return key_or_group.partition("@")[0]


def _named_in(message: str) -> str | None:
    """``'experiment/x'`` of Hydra's ``In 'experiment/x': Could not find ...``: the config
    file whose defaults list names the missing option."""
    found = re.match(r"In '([^']+)'", message)
    return f"conf/{found.group(1)}.yaml" if found else None
