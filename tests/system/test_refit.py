"""Refit (``task=refit``) from the command line, as a user types it: a missing run is one
line and exit 2. The refit itself, and its refusals in this process, are
tests/engine/test_refit.py's."""

from __future__ import annotations

import pytest

from packexp.testing.command import packexp as run_cli


@pytest.mark.process
def test_the_command_line_refuses_a_missing_run_with_one_line_and_exit_2(tmp_path):
    out = run_cli("task=refit", f"hydra.run.dir={tmp_path / 'missing'}")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"packexp: error: hydra.run.dir={tmp_path / 'missing'}: no such directory; give the "
        "run directory of a finished search"]
