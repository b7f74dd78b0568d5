"""Contract tests over every executor found in conf/executor/: each trains the same jobs to
the same numbers as the local one, hands them back in plan order after starting them,
answers ``on_device`` and ``view``, and may be closed twice. The executors that start
processes of their own (Ray's cluster) run it from a driver process of their own: their case is
tests/system/test_executor_contract.py's, on ``run_contract`` here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packexp.testing.config import CONF_DIR

EXECUTORS = sorted(p.stem for p in Path(CONF_DIR, "executor").glob("*.yaml"))
# An executor's settings for the contract: the simulated one keeps it on TensorFlow's trainer
# (its file scores with the fake's synthetic numbers, by design).
SETTINGS = {"simulated": ["executor.trainer=null"]}
IN_THIS_PROCESS = {"local", "simulated"}  # the others start processes of their own

def run_contract(name: str, run_dir: str) -> dict:
    """Three jobs of two plain members through ``executor=name``: the order and the moment
    they came back, their scores and steps, and what the executor answers."""
    from packexp.config import fit_dataset_to_model, instantiate
    from packexp.config.components import worker_cache
    from packexp.config.device import facts_here
    from packexp.executors import CacheView, PackJob
    from packexp.space import Trial
    from packexp.testing.config import compose_config

    cfg = compose_config(["experiment=quick", "pack.fusion=off", f"executor={name}",
                          *SETTINGS.get(name, [])])
    fit_dataset_to_model(cfg)
    cache = worker_cache(cfg)  # the driver's
    executor = instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=run_dir).start(cache)

    def job(key, batch, lr, first):
        hparams = {"batch_size": batch, "optimizer": "adam", "learning_rate": lr,
                   "activation": "relu"}
        group = [Trial(f"{key}{i}", hparams, (), seed=first + i) for i in range(2)]
        return PackJob(key, group, 0.2, {t.trial_id: None for t in group})

    out = {"order": [], "handed_back_unstarted": [], "scores": {}}
    try:
        started = []
        for k, runs in executor.run([job("a", 32, 0.01, 1), job("b", 64, 0.001, 3),
                                     job("c", 32, 0.1, 5)], started.append):
            out["order"].append(k)
            if k not in started:
                out["handed_back_unstarted"].append(k)
            for run in runs:
                for m in run.members:
                    out["scores"][m.trial_id] = [run.evaluation[m.trial_id].val_accuracy,
                                                 m.step]
        out["started"] = sorted(started)
        out["facts"] = "device.cpu" in executor.on_device(facts_here).tags()
        out["view"] = isinstance(executor.view(), CacheView)
    finally:
        executor.close()
        executor.close()
    return out


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict:
    """The contract on the local executor, in this process (through JSON, as a process's)."""
    return json.loads(json.dumps(run_contract("local", str(tmp_path_factory.mktemp("local")))))


def test_every_executor_config_is_found():
    assert {"local", "ray", "simulated"} <= set(EXECUTORS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.tf])
                                  for n in EXECUTORS if n in IN_THIS_PROCESS])
def test_an_executor_trains_as_the_local_one_and_keeps_the_contract(name, tmp_path, local):
    out = local if name == "local" else run_contract(name, str(tmp_path))
    assert out["order"] == [0, 1, 2]  # plan order
    assert out["started"] == [0, 1, 2] and out["handed_back_unstarted"] == []
    assert out["facts"] and out["view"]
    assert out["scores"] == local["scores"]  # plain packs: bit for bit, wherever they train
    assert len(out["scores"]) == 6
