"""Paths an earlier release named (``packexp.moved``): a YAML's or a journal's ``_target_``
and an import still work, with one warning naming the new path."""

from __future__ import annotations

import warnings

import pytest
from hydra._internal.utils import _locate

from packexp import moved
from packexp.config.checks import check_search
from packexp.runner.journal import Journal
from packexp.runner.replay import Recorded
from packexp.testing.config import compose_config


@pytest.fixture(autouse=True)
def unwarned(monkeypatch):
    monkeypatch.setattr(moved, "_warned", set())


def deprecations(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, FutureWarning)]


def test_a_search_space_file_of_the_last_release_composes_with_one_warning(tmp_path):
    (tmp_path / "search_space").mkdir()
    (tmp_path / "search_space" / "old.yaml").write_text(
        "_target_: packexp.search_space.SearchSpace\n_convert_: all\n"
        "params:\n  batch_size: [32, 64]\n  learning_rate: [0.001, 0.01]\n"
        "  optimizer: [sgd, adam]\n")
    cfg = compose_config([f"hydra.searchpath=[file://{tmp_path}]", "search_space=old"])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        space = check_search(cfg)[0]
        check_search(cfg)  # the second use says nothing more
    from packexp.space import SearchSpace

    assert type(space) is SearchSpace and space.size == 8
    assert deprecations(record) == ["packexp.search_space.SearchSpace is deprecated and goes "
                                    "in the next release: use packexp.space.SearchSpace"]


@pytest.mark.parametrize("old", [o for o in moved.MOVED if ".models." not in o])
def test_each_moved_path_is_the_new_object(old):
    new, _ = moved.MOVED[old]
    with pytest.warns(FutureWarning, match=f"use {new}$"):
        assert _locate(old) is _locate(new)


def test_a_merged_builder_is_the_new_one_with_its_keywords():
    """``packexp.models.resnet50.build`` became ``keras_apps.build(application=...)``; the
    old path gives that call."""
    with pytest.warns(FutureWarning, match=r"keras_apps\.build\(application='ResNet50'\)"):
        build = _locate("packexp.models.resnet50.build")
    assert build.func.__module__ == "packexp.models.keras_apps"
    assert build.keywords == {"application": "ResNet50"}


def test_an_unknown_name_in_a_moved_module_is_refused():
    import packexp.hyperband as old

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        old.Nope  # noqa: B018


def test_a_journal_naming_moved_targets_resumes_and_a_changed_key_is_still_refused(tmp_path):
    """A run journaled before the schedulers and the keras.applications builders moved
    compares equal to the config a resume composes now."""
    from packexp.errors import ConfigError

    old = {"seed": 0, "scheduler._target_": "packexp.hyperband.Hyperband",
           "model._target_": "packexp.models.densenet121.build"}
    Journal(tmp_path).append("start", config=old, overrides=[])
    now = {"seed": 0, "scheduler._target_": "packexp.schedulers.hyperband.Hyperband",
           "model._target_": "packexp.models.keras_apps.build",
           "model.application": "DenseNet121"}
    assert Recorded.read(tmp_path).to_continue(now, resume=True)[0]["config"] == old
    with pytest.raises(ConfigError, match=r"scheduler\._target_='packexp\.schedulers\.asha"):
        Recorded.read(tmp_path).to_continue(
            {**now, "scheduler._target_": "packexp.schedulers.asha.Asha"}, resume=True)
