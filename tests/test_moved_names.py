"""Names that moved in the layout of issue 38 keep working, each with a DeprecationWarning
naming where it went."""

from __future__ import annotations

import importlib
import sys

import pytest

from packexp import pack_options, schedulers


@pytest.mark.parametrize(("module", "names", "target"), [
    ("packexp.hyperband", ["Hyperband", "Bracket", "Rung", "keep_best"], schedulers),
    ("packexp.asha", ["Asha", "AshaState", "promotable"], schedulers),
])
def test_a_moved_module_warns_and_gives_the_same_objects(module, names, target):
    sys.modules.pop(module, None)
    with pytest.warns(DeprecationWarning, match="moved to packexp.schedulers"):
        old = importlib.import_module(module)
    for name in names:
        assert getattr(old, name) is getattr(target, name)


def test_the_old_hyperband_module_still_has_steps_for():
    sys.modules.pop("packexp.hyperband", None)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("packexp.hyperband")
    assert old.steps_for is pack_options.steps_for
    assert old.steps_for(2, 10, 100) == 20


@pytest.mark.parametrize("name", ["member_key", "pack_key", "member_bucket", "runtime_hparams"])
def test_a_key_moved_out_of_the_search_space_warns_and_works(name):
    import packexp.search_space as search_space

    with pytest.warns(DeprecationWarning, match=f"moved to packexp.pack_options.{name}"):
        assert getattr(search_space, name) is getattr(pack_options, name)


def test_a_name_that_never_was_is_an_attribute_error():
    import packexp.search_space as search_space

    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        search_space.nonesuch  # noqa: B018
