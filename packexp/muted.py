"""TensorFlow's C++ start-up banner kept off the user's terminal.

TensorFlow 2.21 prints it on stderr (file descriptor 2) while it is imported, before Python
logging exists and whatever ``TF_CPP_MIN_LOG_LEVEL`` says ("All log messages before
absl::InitializeLog() ...", "Could not find cuda drivers ...", oneDNN's line), twice. So
``import packexp`` mutes file descriptor 2 while TensorFlow is first imported, by whoever
imports it (a user's ``import keras`` included); a user who sets ``TF_CPP_MIN_LOG_LEVEL``
keeps TensorFlow's own say. An import that fails still raises its ``ImportError``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any


@contextmanager
def muted_stderr() -> Iterator[None]:
    """File descriptor 2 points at /dev/null for the block (C++ code's writes included)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _MutedLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run with stderr muted."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with muted_stderr():
            self.loader.exec_module(module)  # type: ignore[attr-defined]


class TensorFlowBanner(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the other finders do, and mutes its first import."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        uninstall()  # once: the other finders answer, here and from now on
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _MutedLoader(spec.loader)
        return spec


def install(environ: Any = os.environ) -> None:
    """Mutes TensorFlow's first import in this process, unless it has happened or the user
    set ``TF_CPP_MIN_LOG_LEVEL`` (then TensorFlow's own level holds)."""
    if "tensorflow" in sys.modules or "TF_CPP_MIN_LOG_LEVEL" in environ:
        return
    if not any(isinstance(f, TensorFlowBanner) for f in sys.meta_path):
        sys.meta_path.insert(0, TensorFlowBanner())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TensorFlowBanner)]
