"""The pack engine's settings, choices and optimizers, which the config checks without
TensorFlow; the settings' defaults are defined once."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packexp.pack_options import PACK_ARGS, PACK_DEFAULTS, PackSettings, check_choice
from tests.helpers import compose_config

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = dataclasses.asdict(PACK_DEFAULTS)


def test_the_configs_pack_section_reads_the_pack_settings_defaults():
    """conf/config.yaml reads each default from PackSettings (``${default:}``) beside what
    it means: every setting is there, with the default's type and value."""
    pack = OmegaConf.to_container(compose_config(strategy=None).pack, resolve=True)
    assert {k: (type(v), v) for k, v in pack.items()} == {
        k: (type(v), v) for k, v in DEFAULTS.items()}
    assert PackSettings.from_config(pack) == PACK_DEFAULTS


@pytest.mark.tf
def test_packs_arguments_default_to_the_pack_settings():
    from packexp.packing import Pack

    parameters = inspect.signature(Pack).parameters
    assert set(parameters) & set(DEFAULTS) == set(PACK_ARGS)
    assert {k: parameters[k].default for k in PACK_ARGS} == {k: DEFAULTS[k] for k in PACK_ARGS}


def test_the_configuration_page_states_the_pack_settings_defaults():
    """docs/configuration.md's table of top-level keys, where the manual states them."""
    rows = re.findall(r"^\| `pack\.(\w+)` \| `?([^`|]+?)`? \|",
                      (ROOT / "docs" / "configuration.md").read_text(), re.MULTILINE)
    assert dict(rows) == {k: str(v).lower() if isinstance(v, bool) else str(v)
                          for k, v in DEFAULTS.items()}


def test_a_setting_the_config_lacks_keeps_its_default():
    assert PackSettings.from_config({"fusion": "off"}) == dataclasses.replace(
        PACK_DEFAULTS, fusion="off")
    assert PackSettings.from_config({}).pack_options == {k: DEFAULTS[k] for k in PACK_ARGS}


@pytest.mark.parametrize(("pack", "match"), [
    ({"max_members": 0}, r"^max_members=0: must be an integer >= 1$"),
    ({"reuse": -1}, r"^reuse=-1: must be an integer >= 0 \(packs kept for reuse; 0 builds "
                    r"every pack afresh\)$"),
    ({"chunk_steps": True}, r"^chunk_steps=True: must be an integer >= 1$"),
    ({"eval_batch_size": 1.5}, r"^eval_batch_size=1\.5: must be an integer >= 1$"),
    ({"fusion": "always"}, r"^fusion='always': must be auto, on or off$"),
])
def test_a_bad_setting_is_refused_in_one_line_naming_it(pack, match):
    with pytest.raises(ValueError, match=match):
        PackSettings.from_config(pack)


@pytest.mark.parametrize(("setting", "value", "match"), [
    ("fusion", "always", r"^fusion='always': must be auto, on or off$"),
    ("misaligned", "pad", r"^misaligned='pad': must be mask or switch$"),
    ("jit_compile", 1, r"^jit_compile=1: must be true, false or auto$"),
    ("data_sharing", True, r"^data_sharing=True: must be gather or slice$"),
])
def test_a_value_outside_the_choices_is_refused_naming_them(setting, value, match):
    with pytest.raises(ValueError, match=match):
        check_choice(setting, value)


@pytest.mark.process
def test_the_config_checks_import_no_tensorflow():
    code = ("import sys, packexp.config, packexp.pack_options; "
            "sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[1])
