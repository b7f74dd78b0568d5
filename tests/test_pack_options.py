"""The pack engine's choices and optimizers, which the config checks without TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from packexp.pack_options import CHOICES, check_choice
from tests.conftest import compose_config


def test_every_default_is_a_choice():
    pack = compose_config().pack
    for setting in CHOICES:
        check_choice(setting, pack[setting])


@pytest.mark.parametrize(("setting", "value", "match"), [
    ("fusion", "always", r"^fusion='always': must be auto, on or off$"),
    ("misaligned", "pad", r"^misaligned='pad': must be mask or switch$"),
    ("jit_compile", 1, r"^jit_compile=1: must be true, false or auto$"),
    ("data_sharing", True, r"^data_sharing=True: must be gather or slice$"),
])
def test_a_value_outside_the_choices_is_refused_naming_them(setting, value, match):
    with pytest.raises(ValueError, match=match):
        check_choice(setting, value)


def test_the_config_checks_import_no_tensorflow():
    code = ("import sys, packexp.config, packexp.pack_options; "
            "sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[1])
