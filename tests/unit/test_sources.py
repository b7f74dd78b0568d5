"""packexp/config/sources.py: a target's defaults and docstrings read from its source, the
module never imported (``--help`` without TensorFlow); whatever the source does not state in
literals is UNKNOWN, which the help then reads by importing."""

from __future__ import annotations

import sys
import textwrap

import pytest

from packexp.config.sources import UNKNOWN, source_default, source_docstrings

PACKAGE = {
    "__init__.py": """
        raise RuntimeError("imported")  # reading must not import the package

        def __getattr__(name):
            if name == "Lazy":
                from shelf.lazy import Lazy
                return Lazy
            raise AttributeError(name)
        """,
    "constants.py": """
        SIZES = (16, 32)
        """,
    "parts.py": """
        import dataclasses
        from dataclasses import dataclass, field
        from .constants import SIZES

        RATE = 1 / 3
        WIDTH: int = 64

        def build(width=WIDTH, sizes=SIZES, *, rate=RATE, name="mlp", depth=-2, scale=2 ** 3,
                  made=object(), required=None):
            '''Builds.

            Args:
                width: Units per layer, a sentence
                    that goes on.
            '''

        class Base:
            def __init__(self, R, eta=3, **kwargs):
                '''Takes R.'''

        class Child(Base):
            '''A child.'''

        @dataclass(frozen=True)
        class Settings:
            members: int = 8
            mode: str = field(default="mask")
            shape: list = field(default_factory=list)

        @dataclasses.dataclass
        class More(Settings):
            extra: bool = False
        """,
    "lazy.py": """
        class Lazy:
            def __init__(self, address=None):
                pass
        """,
}


@pytest.fixture
def shelf(tmp_path, monkeypatch):
    root = tmp_path / "shelf"
    root.mkdir()
    for name, text in PACKAGE.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    assert not [m for m in sys.modules if m == "shelf" or m.startswith("shelf.")]


@pytest.mark.parametrize(("target", "key", "expected"), [
    ("shelf.parts.build", "width", 64),  # a module constant
    ("shelf.parts.build", "sizes", (16, 32)),  # a constant imported from another module
    ("shelf.parts.build", "rate", 1 / 3),  # arithmetic, keyword-only
    ("shelf.parts.build", "name", "mlp"),
    ("shelf.parts.build", "depth", -2),
    ("shelf.parts.build", "scale", 8),
    ("shelf.parts.build", "required", None),
    ("shelf.parts.Child", "eta", 3),  # the base's __init__
    ("shelf.parts.Settings", "members", 8),  # a dataclass's fields
    ("shelf.parts.Settings", "mode", "mask"),
    ("shelf.parts.More", "members", 8),  # a field inherited
    ("shelf.parts.More", "extra", False),
    ("shelf.Lazy", "address", None),  # a package's __getattr__ imports it
])
def test_a_default_is_read_from_the_source(shelf, target, key, expected):
    value = source_default(target, key)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("target", "key"), [
    ("shelf.parts.build", "made"),  # a call: only running it tells
    ("shelf.parts.build", "nosuch"),
    ("shelf.parts.Child", "R"),  # no default
    ("shelf.parts.Child", "other"),  # **kwargs
    ("shelf.parts.Settings", "shape"),  # a default_factory
    ("shelf.parts.nosuch", "width"),
    ("shelf.nosuch.build", "width"),
    ("nosuch_package_at_all.build", "width"),
])
def test_what_the_source_does_not_state_is_unknown(shelf, target, key):
    assert source_default(target, key) is UNKNOWN


def test_docstrings_are_read_from_the_source(shelf):
    assert source_docstrings("shelf.parts.build")[0].startswith("Builds.\n\nArgs:\n    width:")
    assert source_docstrings("shelf.parts.Child") == ["A child.", ""]
    assert source_docstrings("shelf.parts.Base") == ["", "Takes R."]
    assert source_docstrings("shelf.parts.nosuch") is None


def test_packexp_s_own_defaults_are_read_without_importing_them():
    # The profile's module imports TensorFlow; reading it must not.
    before = "packexp.profile.num_models" in sys.modules
    assert source_default("packexp.profile.num_models.NumModelsProfile", "num_models") == (
        1, 2, 4, 8)
    assert source_default("packexp.space.options.PackSettings", "max_members") == 8
    assert source_default("packexp.schedulers.hyperband.Hyperband", "eta") == 3
    assert ("packexp.profile.num_models" in sys.modules) == before
