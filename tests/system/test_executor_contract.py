"""The executor contract (tests/engine/test_executor_contract.py's ``run_contract``) for the
executors that start processes of their own (Ray's cluster): each runs it from a driver
process of its own and trains the same jobs to the same numbers as the local one in this
process, hands them back in plan order after starting them, answers ``on_device`` and
``view``, and may be closed twice. Ray's case is ``slow`` (it starts a cluster of its own) and
skips without the ``ray`` extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from packexp.testing.config import ROOT
from tests.engine.test_executor_contract import EXECUTORS, IN_THIS_PROCESS, run_contract

# An executor that starts processes of its own (Ray's cluster) runs the contract from a
# driver process of its own, as python -m packexp would.
IN_A_PROCESS = """
import json, sys
from tests.engine.test_executor_contract import run_contract

print(json.dumps(run_contract(sys.argv[1], sys.argv[2])))
"""


def contract(name: str, env: dict, run_dir: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", IN_A_PROCESS, name, str(run_dir)], cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict:
    """The contract on the local executor, in this process (through JSON, as a process's)."""
    return json.loads(json.dumps(run_contract("local", str(tmp_path_factory.mktemp("local")))))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.process, pytest.mark.slow])
                                  for n in EXECUTORS if n not in IN_THIS_PROCESS])
def test_an_executor_trains_as_the_local_one_and_keeps_the_contract(name, request, tmp_path,
                                                                   local):
    env = dict(os.environ)
    if name == "ray":
        pytest.importorskip("ray")
        env = request.getfixturevalue("ray_env")
    out = contract(name, env, tmp_path)
    assert out["order"] == [0, 1, 2]  # plan order
    assert out["started"] == [0, 1, 2] and out["handed_back_unstarted"] == []
    assert out["facts"] and out["view"]
    assert out["scores"] == local["scores"]  # plain packs: bit for bit, wherever they train
    assert len(out["scores"]) == 6
