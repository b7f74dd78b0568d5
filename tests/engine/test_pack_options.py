"""The pack engine's settings, choices and optimizers, which the config checks without
TensorFlow; the settings' defaults are defined once; the one choice of a pack's program."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packexp.space.options import (
    FUSED,
    LOOPED,
    PACK_ARGS,
    PACK_DEFAULTS,
    PLAIN,
    SINGLE,
    Facts,
    PackSettings,
    check_choice,
    choose_program,
    fusion_modes,
)
from packexp.testing.config import compose_config

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = dataclasses.asdict(PACK_DEFAULTS)


def test_the_configs_pack_section_reads_the_pack_settings_defaults():
    """conf/config.yaml reads each default from PackSettings (``${default:}``) beside what
    it means: every setting is there, with the default's type and value."""
    pack = OmegaConf.to_container(compose_config(strategy=None).pack, resolve=True)
    assert {k: (type(v), v) for k, v in pack.items()} == {
        k: (type(v), v) for k, v in DEFAULTS.items()}
    assert PackSettings.from_config(pack) == PACK_DEFAULTS


@pytest.mark.tf
def test_a_pack_takes_the_pack_settings_a_runs_defaults_unless_given():
    from packexp.packing import Pack

    parameters = inspect.signature(Pack).parameters
    assert parameters["settings"].default is PACK_DEFAULTS
    assert not set(parameters) & set(DEFAULTS)  # no setting is a keyword of its own
    assert set(PACK_ARGS) <= set(DEFAULTS) and set(PACK_DEFAULTS.pack_options) == set(PACK_ARGS)


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


# The one choice of a pack's program (choose_program), as the engine, the cache and the cost
# model make it.

DENSE_PAIR = Facts(2)


@pytest.mark.parametrize(("facts", "settings", "kind", "xla"), [
    (DENSE_PAIR, PackSettings(), FUSED, True),  # auto: Dense members fuse and compile
    (Facts(1), PackSettings(), PLAIN, True),  # a single compiles: never looped under XLA
    (Facts(1), PackSettings(jit_compile=False), LOOPED, False),
    (DENSE_PAIR, PackSettings(fusion="off", jit_compile=False), LOOPED, False),
    (DENSE_PAIR, PackSettings(fusion="off", jit_compile=False, loop="off"), PLAIN, False),
    (Facts(2, convolutional=True), PackSettings(), LOOPED, False),  # CNNs on a CPU: looped
    (Facts(2, convolutional=True, gpu=True), PackSettings(), FUSED, False),
    (Facts(2, convolutional=True), PackSettings(fusion="on"), FUSED, False),
    (Facts(1), PackSettings(fusion="on"), FUSED, True),  # on fuses a single too
    (DENSE_PAIR, PackSettings(data_sharing="slice"), PLAIN, False),
    (DENSE_PAIR, PackSettings(misaligned="switch", jit_compile=False), FUSED, False),
    (Facts(2, unfusable="member t1: adamw"), PackSettings(misaligned="switch"), PLAIN, False),
    (Facts(2, unfusable="x"), PackSettings(jit_compile=True), PLAIN, True),
    (Facts(2, unfusable="x", unloopable="members' architectures differ"),
     PackSettings(jit_compile=False), PLAIN, False),
])
def test_one_choice_of_program(facts, settings, kind, xla):
    program = choose_program(facts, settings)
    assert (program.kind, program.xla) == (kind, xla)
    assert (program.unfused is None) == (kind == FUSED)
    assert (program.unlooped is None) == (kind != PLAIN)


def test_why_a_pack_is_not_fused_or_not_looped_is_named():
    assert choose_program(Facts(1), PackSettings()).unfused == SINGLE
    cnn = choose_program(Facts(2, convolutional=True), PackSettings())
    assert "GPU only" in cnn.unfused
    sliced = choose_program(DENSE_PAIR, PackSettings(data_sharing="slice"))
    assert "gather" in sliced.unfused and "gather" in sliced.unlooped
    assert choose_program(Facts(2, unfusable="x", unloopable="members' architectures differ"),
                          PackSettings(jit_compile=False)).unlooped == (
        "members' architectures differ")


@pytest.mark.parametrize(("facts", "settings", "modes"), [
    (DENSE_PAIR, PackSettings(), ("off", "on")),
    (Facts(1), PackSettings(), ("off",)),
    (Facts(2, unfusable="adamw"), PackSettings(), ("off",)),
    (DENSE_PAIR, PackSettings(fusion="on"), ("on",)),
    (DENSE_PAIR, PackSettings(fusion="on", data_sharing="slice"), ("off",)),  # never fuses
    (DENSE_PAIR, PackSettings(fusion="off"), ("off",)),
])
def test_a_planner_offers_the_fusion_the_engine_would_take(facts, settings, modes):
    assert fusion_modes(facts, settings) == modes
