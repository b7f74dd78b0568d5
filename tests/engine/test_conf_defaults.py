"""One source per default: a config file's key whose value is its ``_target_``'s default says
``${default:}``, which reads the default from the signature (``config.constructor_default``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf

from packexp.config import config_errors, instantiate
from packexp.config.sources import source_default
from packexp.errors import ConfigError
from packexp.testing.config import CONF_DIR, compose_config


def _targeted(path: Path) -> tuple[str, dict] | None:
    node = OmegaConf.to_container(OmegaConf.load(path))
    return (node["_target_"], node) if isinstance(node, dict) and "_target_" in node else None


# The group files that name a class or function (experiment bundles and the like do not).
# A profile's module times TensorFlow packs: reading its signature imports TensorFlow.
FILES = [pytest.param(p, id=f"{p.parent.name}/{p.name}",
                      marks=[pytest.mark.tf] if p.parent.name == "profile" else [])
         for p in sorted(Path(CONF_DIR).glob("*/*.yaml")) if _targeted(p)]


@pytest.mark.parametrize("path", FILES)
def test_no_config_file_writes_a_default_its_code_writes(path):
    """A literal equal to the constructor's default is a second source that can drift (as
    sampler=tpe's random_fraction did, 0.333 against 1/3). A null for a file path a user
    must give stays written: it says "give me one"."""
    target, node = _targeted(path)
    parameters = inspect.signature(hydra.utils.get_object(target)).parameters
    repeated = []
    for key, value in node.items():
        p = parameters.get(key)
        if key.startswith("_") or p is None or p.default is inspect.Parameter.empty:
            continue
        if value is None and key in ("path", "target", "features"):
            continue
        default = list(p.default) if isinstance(p.default, tuple) else p.default
        if value == default:
            repeated.append(key)
    assert not repeated, f"{path.name}: write {repeated} as ${{default:}}"


@pytest.mark.parametrize("path", FILES)
def test_every_default_key_resolves_to_its_constructors_default(path):
    target, node = _targeted(path)
    parameters = inspect.signature(hydra.utils.get_object(target)).parameters
    cfg = OmegaConf.load(path)
    for key, value in node.items():
        if isinstance(value, str) and value.startswith("${default:"):
            source = value[len("${default:"):-1]
            if source:  # ${default:a.b.f}: f's, which a swapped _target_ keeps (model files)
                parameters = inspect.signature(hydra.utils.get_object(source)).parameters
            default = parameters[key].default
            got = cfg[key]  # only this key: others may name the root's (${seed})
            got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
            assert got == (list(default) if isinstance(default, tuple) else default)


def _default_keys(node: dict, target: str | None, where: str = ""):
    """(key, the target it defaults from, its node's dotted place) of each ${default:}."""
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _default_keys(value, value.get("_target_"), f"{where}{key}.")
        elif isinstance(value, str) and value.startswith("${default:"):
            yield key, value[len("${default:"):-1] or target, where


@pytest.mark.parametrize("path", [*FILES, Path(CONF_DIR) / "config.yaml"])
def test_every_default_key_reads_the_same_from_its_source(path):
    """--help resolves ${default:} from the target's source, not by importing it
    (``config.sources``): the value must be the signature's, key for key."""
    node = OmegaConf.to_container(OmegaConf.load(path))
    for key, target, where in _default_keys(node, node.get("_target_")):
        parameter = inspect.signature(hydra.utils.get_object(target)).parameters[key]
        assert source_default(target, key) == parameter.default, f"{where}{key} ({target})"


@pytest.mark.tf  # the profile's module, whose default it reads, imports TensorFlow
def test_a_default_key_can_be_overridden_and_resolves_in_place():
    cfg = OmegaConf.create({"scheduler": {
        "_target_": "packexp.schedulers.hyperband.Hyperband", "R": 9, "eta": "${default:}",
        "continue_on_promotion": "${default:}", "lr_horizon": "${default:}"}})
    assert instantiate(cfg.scheduler, "scheduler").eta == 3
    cfg.scheduler.eta = 2
    assert instantiate(cfg.scheduler, "scheduler").eta == 2
    profile = OmegaConf.create({"_target_": "packexp.profile.memory.MemoryProfile",
                                "num_models": "${default:}"})
    OmegaConf.resolve(profile)  # what --cfg job --resolve does
    assert list(profile.num_models) == [1, 2]


@pytest.mark.parametrize(("node", "message"), [
    ({"width": "${default:}"}, "model.width: ${default:} needs a _target_ beside it"),
    ({"_target_": "packexp.models.mlp3.build", "nonesuch": "${default:}"},
     "model.nonesuch: ${default:}, but packexp.models.mlp3.build has no default for nonesuch; "
     "set model.nonesuch=<value>"),
    ({"_target_": "your_models.build", "width": "${default:}"},
     "model._target_='your_models.build': cannot be imported (ModuleNotFoundError: No module "
     "named 'your_models'); run python -m packexp where your_models is importable (from the "
     "folder that holds it, or with that folder on PYTHONPATH)"),
])
def test_a_default_key_without_one_is_one_line_naming_it(node, message):
    cfg = OmegaConf.create({"model": node})
    with pytest.raises(ConfigError) as info, config_errors():
        OmegaConf.to_container(cfg, resolve=True)
    assert str(info.value) == message


def test_a_builder_of_your_own_gets_the_model_files_values(tmp_path):
    """model._target_ swapped for a builder of one's own: the model file's keys name mlp3's
    defaults (${default:packexp.models.mlp3.build}), so the builder gets width=64 and depth=3
    as before defaults were read from the code."""
    cfg = compose_config(["model._target_=tests.engine.test_conf_defaults.settings_of"])
    assert instantiate(cfg.model, "model")() == {"width": 64, "depth": 3}


def settings_of(**settings):
    return settings
