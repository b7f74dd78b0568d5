"""Public paths an earlier release named, importable for one more release with one warning."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

# What a ``_target_`` (a YAML of the user's, a run's .hydra/config.yaml that refit or a resume
# reads) or an import may still name: the old path, its new one, and the keywords the new one
# needs to be the old (a builder merged into one taking the class's name).
MOVED: dict[str, tuple[str, dict[str, Any]]] = {
    "packexp.search_space.SearchSpace": ("packexp.space.SearchSpace", {}),
    "packexp.hyperband.Hyperband": ("packexp.schedulers.hyperband.Hyperband", {}),
    "packexp.asha.Asha": ("packexp.schedulers.asha.Asha", {}),
    "packexp.run.RunDirCheck": ("packexp.app.main.RunDirCheck", {}),
    "packexp.session.RunDirCheck": ("packexp.app.main.RunDirCheck", {}),
    "packexp.models.resnet50.build": ("packexp.models.keras_apps.build",
                                      {"application": "ResNet50"}),
    "packexp.models.densenet121.build": ("packexp.models.keras_apps.build",
                                         {"application": "DenseNet121"}),
}
MODULES = frozenset(old.rsplit(".", 1)[0] for old in MOVED)
_warned: set[str] = set()


def moved(old: str) -> Any:
    """The object ``old`` names now, with one ``FutureWarning`` naming its new path (once per
    path in a process)."""
    new, keywords = MOVED[old]
    if old not in _warned:
        _warned.add(old)
        call = "".join(f", {k}={v!r}" for k, v in keywords.items())
        named = f"{new}({call[2:]})" if keywords else new
        warnings.warn(f"{old} is deprecated and goes in the next release: use {named}",
                      FutureWarning, stacklevel=3)
    module, name = new.rsplit(".", 1)
    obj = getattr(importlib.import_module(module), name)
    return functools.partial(obj, **keywords) if keywords else obj


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module as one whose names are looked up in ``MOVED``."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"Moved: {', '.join(sorted(_names(spec.name)))}.")

        def __getattr__(name: str) -> Any:
            if f"{spec.name}.{name}" in MOVED:
                return moved(f"{spec.name}.{name}")
            raise AttributeError(f"module {spec.name!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _names(module: str) -> list[str]:
    return [f"{old} -> {new}" for old, (new, _) in MOVED.items()
            if old.rsplit(".", 1)[0] == module]


def install() -> None:
    """Puts the finder on ``sys.meta_path`` once (``import packexp`` does)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
