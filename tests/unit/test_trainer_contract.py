"""The trainer seam (``executors.Trainer``) whole: both trainers have every member the protocol
declares, a search asks its trainer nothing else, each answers for its device, and nothing in
``app/`` or ``config/`` asks whether a trainer measures one."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import Mock

import pytest

from packexp.errors import ConfigError
from packexp.executors.base import DeviceReport, Trainer
from packexp.packing.engine import TensorFlowTrainer
from packexp.strategies.knn import KnnStrategy
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeCache, FakeTrainer
from packexp.testing.searches import search_on_fake

PACKEXP = Path(__file__).resolve().parents[2] / "packexp"
ATTRIBUTES = sorted(Trainer.__annotations__)
METHODS = sorted(n for n, v in vars(Trainer).items()
                 if inspect.isfunction(v) and not n.startswith("_"))


def test_the_protocol_declares_the_device_calls_and_the_packs_calls():
    assert ATTRIBUTES == ["checkpoint_suffix", "measures_device", "name"]
    assert METHODS == ["cache", "device_facts", "export", "member_state", "prepare_device",
                       "read_state", "set_up", "start", "train_group", "write_state"]


@pytest.mark.parametrize("trainer", [TensorFlowTrainer, FakeTrainer])
@pytest.mark.parametrize("member", ATTRIBUTES + METHODS)
def test_each_trainer_has_every_member_the_protocol_declares(trainer, member):
    """On the class, so TensorFlow's ``checkpoint_suffix`` (a property) loads no TensorFlow."""
    assert hasattr(trainer, member)
    if member in METHODS:
        declared = list(inspect.signature(getattr(Trainer, member)).parameters.values())
        given = list(inspect.signature(getattr(trainer, member)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in given[:len(declared)]] == [
            (p.name, p.kind, p.default) for p in declared]
        assert all(p.default is not p.empty for p in given[len(declared):])


class Asked:
    """A trainer seen from the search: each of its names the search asks for, noted."""

    def __init__(self, trainer: FakeTrainer) -> None:
        self.trainer = trainer
        self.names: set[str] = set()

    def __getattr__(self, name: str):
        self.names.add(name)
        return getattr(self.trainer, name)


def test_a_search_and_its_refit_ask_their_trainer_only_what_the_protocol_declares(tmp_path):
    asked = Asked(FakeTrainer(failing=""))
    search_on_fake(tmp_path, "tracking=none", "experiment=quick", "refit=true", trainer=asked)
    assert asked.names <= set(ATTRIBUTES + METHODS)
    assert {"set_up", "cache", "device_facts", "prepare_device", "train_group", "write_state",
            "read_state", "export"} <= asked.names


def test_a_job_has_its_trainer_start_what_trains(monkeypatch):
    from packexp.app import main

    monkeypatch.setattr(main, "run", lambda cfg, trainer: 0.0)
    monkeypatch.setattr(main, "start_tensorflow", Mock())
    asked = Asked(FakeTrainer())
    main.job(compose_config(["experiment=quick"]), asked)
    assert asked.names == {"start"} and not main.start_tensorflow.called
    main.job(compose_config(["task=plan"]))  # on TensorFlow's trainer
    main.start_tensorflow.assert_called_once_with(use_gpu=True)


def test_tensorflow_s_trainer_hands_its_device_calls_to_the_search_s_parts():
    parts, started = Mock(), Mock()
    trainer = TensorFlowTrainer()
    trainer.start(started)
    trainer.set_up(parts, probe=True)
    assert trainer.cache(parts, "dataset") is parts.pack_cache.return_value
    assert trainer.device_facts(parts, "executor") is parts.measured_facts.return_value
    assert (trainer.prepare_device(parts, "cache", "executor", "facts", Path("run"))
            is parts.measure_device.return_value)
    started.assert_called_once_with()
    parts.set_up_device.assert_called_once_with(True)
    parts.pack_cache.assert_called_once_with("dataset")
    parts.measured_facts.assert_called_once_with("executor")
    parts.measure_device.assert_called_once_with("cache", "executor", "facts", Path("run"))


def parts_of(strategy, max_members: int = 8) -> SimpleNamespace:
    return SimpleNamespace(strategy=strategy, names={"strategy": "cost"},
                           max_members=max_members)


@pytest.mark.parametrize(("members", "max_members", "capacity"), [(2, 8, 2), (5, 3, 3)])
def test_the_fake_answers_for_a_device_it_does_not_measure(tmp_path, members, max_members,
                                                           capacity):
    trainer, started = FakeTrainer(members=members), Mock()
    trainer.start(started)
    trainer.set_up(parts_of(KnnStrategy()), probe=True)
    assert not started.called
    assert isinstance(trainer.cache(None, SimpleNamespace(train_size=7)), FakeCache)
    facts = trainer.device_facts(None, None)
    assert facts.tags() == {"device.cpu": "fake", "device.onednn": "unknown",
                            "device.gpus": "none"}
    report = trainer.prepare_device(parts_of(KnnStrategy(), max_members), FakeCache(),
                                    SimpleNamespace(simulated=False), facts, tmp_path)
    assert isinstance(report, DeviceReport)
    assert (report.capacity.limit, report.source) == (capacity, "fake trainer")
    assert (report.probe_seconds(), report.memory_probes(), report.calibration_s) == (
        0.0, None, 0.0)


@pytest.mark.parametrize(("simulated", "says"), [
    (False, r"^strategy=cost: weighs measured costs, which the fake trainer does not measure$"),
    (True, r"^strategy=cost: weighs costs measured on the device, which executor=simulated's "
           r"fake trainer does not measure; add strategy=knn \(or none, random, batch_size\)$"),
])
def test_the_fake_refuses_a_strategy_that_weighs_costs(tmp_path, simulated, says):
    from packexp.strategies.cost import CostStrategy

    with pytest.raises(ConfigError, match=says):
        FakeTrainer().prepare_device(parts_of(CostStrategy()), FakeCache(),
                                     SimpleNamespace(simulated=simulated), None, tmp_path)


@pytest.mark.parametrize("package", ["app", "config"])
def test_no_module_of_the_app_or_the_config_asks_whether_a_trainer_measures_its_device(
        package):
    """The trainer answers for its device; only the trainers, and Ray's executor (its actors
    measure theirs), read ``measures_device``."""
    naming = [str(p.relative_to(PACKEXP)) for p in sorted((PACKEXP / package).rglob("*.py"))
              if "measures_device" in p.read_text()]
    assert naming == []
