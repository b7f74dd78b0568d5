"""TensorFlow's C++ start-up banner kept off the user's terminal.

TensorFlow 2.21 prints it on stderr (file descriptor 2) while it is imported, before Python
logging exists and whatever ``TF_CPP_MIN_LOG_LEVEL`` says above 0 ("All log messages before
absl::InitializeLog() ...", "Could not find cuda drivers ...", oneDNN's line), twice. So
``import packexp`` holds what file descriptor 2 receives while TensorFlow is first imported,
by whoever imports it (a user's ``import keras`` included), and drops it once the import
succeeds; an import that fails prints it, then raises. ``TF_CPP_MIN_LOG_LEVEL=0`` keeps
TensorFlow's own say.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType


@contextmanager
def muted_stderr() -> Iterator[None]:
    """File descriptor 2's writes in the block (C++ code's included) held back: dropped if
    the block succeeds, written out if it raises. Where there is no file descriptor 2 (a
    daemon), the block runs as it is."""
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            os.write(2, held.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class _MutedLoader(importlib.abc.Loader):
    """A loader whose ``exec_module`` runs the real one's with stderr muted, then puts the
    real one back on the module (``importlib.resources`` reads it)."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        with muted_stderr():
            self.loader.exec_module(module)  # type: ignore[attr-defined]


class MutedImportFinder(importlib.abc.MetaPathFinder):
    """Finds the module ``name`` as the other finders do, and mutes its first import (one
    that only looks for it, ``importlib.util.find_spec``, leaves the mute for the import)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._finding = threading.local()

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.name or getattr(self._finding, "active", False):
            return None
        self._finding.active = True  # the other finders answer the lookup below
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _MutedLoader(spec.loader)
        return spec


def install(name: str = "tensorflow") -> None:
    """Mutes ``name``'s first import in this process, unless it has happened or the user set
    ``TF_CPP_MIN_LOG_LEVEL=0`` (TensorFlow's lines wanted)."""
    if name in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    if not any(isinstance(f, MutedImportFinder) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, MutedImportFinder(name))
