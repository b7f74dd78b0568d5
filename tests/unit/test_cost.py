"""strategy=cost: the cost model's fit and the planner, on fake devices with known curves."""

from __future__ import annotations

import json
import logging
import math

import pytest

from packexp.space import SearchSpace, Trial
from packexp.strategies import Capacity, RungContext
from packexp.strategies.cost import CostModel, CostStrategy
from packexp.testing.calibration import device

SPACE = SearchSpace({"batch_size": [16, 32, 64], "optimizer": ["sgd"],
                     "learning_rate": [0.1, 0.01], "activation": ["relu", "tanh"]},
                    categorical=["optimizer", "activation"])


def strategy(calibration: dict, seed: int = 0) -> CostStrategy:
    s = CostStrategy(seed=seed, calibration_dir=None)
    s.use_costs(calibration)
    return s


def trials(n: int, seed: int = 1) -> list[Trial]:
    return SPACE.sample(n, seed, bracket=0)


def context(ts, steps=100, **kwargs) -> RungContext:
    return RungContext(steps={t.trial_id: steps for t in ts}, **kwargs)


def partitions(items):
    """Every partition of ``items`` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for i in range(len(smaller)):
            yield [*smaller[:i], [first, *smaller[i]], *smaller[i + 1:]]
        yield [[first], *smaller]


def test_the_fit_recovers_a_devices_curves():
    model = CostModel.fit(device(plain=(2e-3, 1e-3, 1e-5), fused=(1e-3, 5e-4, 2e-5)))
    assert model.plain == pytest.approx((2e-3, 1e-3, 1e-5), abs=1e-9)
    assert model.fused == pytest.approx((1e-3, 5e-4, 2e-5), abs=1e-9)
    assert model.plain_setup == pytest.approx((0.1, 0.05))
    assert model.error["median"] == pytest.approx(0.0, abs=1e-6)
    # A plain pack skips finished members; a fused one pads to the largest batch.
    assert model.train_s([16, 64], [10, 30], "off") == pytest.approx(
        30 * 2e-3 + 10 * (1e-3 + 16e-5) + 30 * (1e-3 + 64e-5))
    assert model.train_s([16, 64], [10, 30], "on") == pytest.approx(
        30 * (1e-3 + 2 * (5e-4 + 64 * 2e-5)))


def test_a_singles_bookkeeping_comes_from_its_timed_cycles():
    """Cycles timed whole (the search's path for a kept single) give ``pack_s``: what such a
    pack takes beyond its steps and evaluation; traced cycles are left out."""
    record = device(plain=(2e-3, 1e-3, 1e-5), evaluate=(3e-3, 1e-3), load_s=0.004)
    cycles = [(30, 0.011), (20, 0.013), (30, 0.012), (25, 0.5)]
    record["cycles"] = [{"batches": [64], "steps": [k], "traced": i == 3,
                         "duration_s": k * (2e-3 + 1e-3 + 64e-5) + 4e-3 + extra}
                        for i, (k, extra) in enumerate(cycles)]
    model = CostModel.fit(record)
    assert model.pack_s == pytest.approx(0.012)
    ready = model.duration_s([64], [40], "off", new=False, builds=0, checkpoint=False)
    assert ready == pytest.approx(0.012 + model.train_s([64], [40], "off") + 4e-3)
    # Further members load their states; without cycles each member is one load.
    pair = model.duration_s([64, 64], [40, 40], "off", new=False, builds=0, checkpoint=False)
    assert pair == pytest.approx(0.012 + 0.004 + model.train_s([64, 64], [40, 40], "off")
                                 + 5e-3)
    assert CostModel.fit(device(load_s=0.004)).duration_s(
        [64], [40], "off", new=False, builds=0, checkpoint=False) == pytest.approx(
        0.004 + CostModel.fit(device()).train_s([64], [40], "off"))


def test_members_padded_to_the_bucket_step_at_its_size():
    record = device(plain=(0.0, 1e-4, 1e-5), fused=(0.0, 1e-4, 1e-5))
    model = CostModel.fit({**record, "settings": {**record["settings"], "batch_bucket": 64}})
    unpadded = CostModel.fit(record)
    assert model.step_s([16], "off") == pytest.approx(unpadded.step_s([64], "off"))
    assert model.train_s([16, 64], [10, 30], "off") == pytest.approx(
        unpadded.train_s([64, 64], [10, 30], "off"))
    assert model.step_s([16, 16], "on") == pytest.approx(unpadded.step_s([64, 64], "on"))
    assert unpadded.step_s([16], "off") < unpadded.step_s([64], "off")


def test_the_planner_finds_the_known_optimum_of_a_small_rung():
    """Packing saves a per-step cost, set-up grows with members, memory holds three: the
    best partition is found by trying all 203 partitions of six trials."""
    s = strategy(device(plain=(4e-3, 1e-3, 0.0), plain_setup=(0.05, 0.12), fusion="off"))
    ts = trials(6)
    capacity = Capacity.members(3)
    rung = context(ts, steps=60)
    best = min(s.plan_cost(p, rung)[0] for p in partitions(ts)
               if all(capacity.fits(g) for g in p))
    planned = s.plan(ts, capacity, rung)
    assert s.plan_cost([g for g, _ in planned], rung)[0] == pytest.approx(best)
    assert 1 < max(len(g) for g, _ in planned) <= 3


def test_a_device_slower_packed_gets_singletons():
    s = strategy(device(plain=(0.0, 2e-3, 0.0), fused=(0.0, 3e-3, 0.0), plain_setup=(0.0, 0.3),
                        fused_setup=(0.0, 0.3)))
    ts = trials(10)
    planned = s.plan(ts, Capacity.members(8), context(ts))
    assert [len(g) for g, _ in planned] == [1] * 10
    assert {f for _, f in planned} == {"off"}


def test_a_device_much_faster_packed_gets_the_largest_packs():
    s = strategy(device(plain=(5e-2, 1e-4, 0.0), fused=(5e-2, 1e-5, 0.0),
                        plain_setup=(0.1, 0.01), fused_setup=(0.1, 0.001)))
    ts = trials(12)
    planned = s.plan(ts, Capacity.members(4), context(ts, steps=1000))
    assert sorted(len(g) for g, _ in planned) == [4, 4, 4]
    assert {f for _, f in planned} == {"on"}  # fused is the faster of the two here


def test_memory_limits_are_respected():
    s = strategy(device(plain=(5e-2, 1e-4, 0.0), plain_setup=(0.1, 0.01), fusion="off"))
    ts = trials(12)
    # Bytes: a member costs its batch size; a pack may hold 100.
    capacity = Capacity(limit=100.0, cost=lambda t: float(t.hparams["batch_size"]),
                        max_members=8)
    planned = s.plan(ts, capacity, context(ts, steps=1000))
    assert sorted(t.trial_id for g, _ in planned for t in g) == sorted(t.trial_id for t in ts)
    assert all(capacity.fits(g) for g, _ in planned)
    assert max(len(g) for g, _ in planned) > 1


def test_the_same_calibration_and_seed_give_the_same_plan():
    calibration = device(plain=(3e-3, 1e-3, 1e-5), fused=(2e-3, 8e-4, 1e-5))
    ts = trials(15)
    a = strategy(json.loads(json.dumps(calibration)), seed=3).plan(
        ts, Capacity.members(4), context(ts))
    b = strategy(json.loads(json.dumps(calibration)), seed=3).plan(
        list(reversed(ts)), Capacity.members(4), context(ts))
    assert ([[t.trial_id for t in g] for g, _ in a], [f for _, f in a]) == (
        [[t.trial_id for t in g] for g, _ in b], [f for _, f in b])


def test_a_kept_pack_is_predicted_without_its_set_up():
    s = strategy(device(plain=(1e-3, 1e-3, 0.0), plain_setup=(0.5, 0.0), fusion="off"))
    ts = trials(2)
    rung = context(ts)
    fresh = s.predict(ts, "off", rung)
    from packexp.space.options import member_key, pack_key

    replayed = frozenset(member_key(t) for t in ts)
    kept = s.predict(ts, "off", context(ts, kept=frozenset({pack_key(ts, False, "off")}),
                                        replayed=replayed))
    assert fresh - kept == pytest.approx(0.5 + 2 * (0.02 - 0.001), abs=1e-9)


def test_fusion_off_is_never_overruled():
    s = strategy(device(plain=(5e-2, 1e-4, 0.0), fused=(5e-2, 1e-6, 0.0), fusion="off"))
    ts = trials(8)
    assert {f for _, f in s.plan(ts, Capacity.members(8), context(ts, steps=1000))} == {"off"}


def test_a_member_without_a_fused_rule_makes_its_pack_plain_in_the_plan():
    """Fused packs are much faster on this device, but weight decay and adamw have no fused
    rule: the plan fuses only packs of members that have one, as the pack engine would."""
    s = strategy(device(plain=(5e-2, 1e-4, 0.0), fused=(5e-2, 1e-5, 0.0),
                        plain_setup=(0.1, 0.01), fused_setup=(0.1, 0.001)))
    space = SearchSpace({"batch_size": [16, 32], "optimizer": ["sgd", "adamw"],
                         "learning_rate": [0.1, 0.01], "weight_decay": [None, 0.01]},
                        categorical=["optimizer"])
    ts = space.sample(16, 1, bracket=0)
    planned = s.plan(ts, Capacity.members(4), context(ts, steps=1000))
    for group, fusion in planned:
        fusable = all(t.hparams["optimizer"] == "sgd" and not t.hparams["weight_decay"]
                      for t in group)
        assert fusion == "off" or fusable
    plain_sgd = [t for t in ts if t.hparams["optimizer"] == "sgd" and not t.hparams["weight_decay"]]
    decayed = [t for t in ts if t.hparams["optimizer"] == "sgd" and t.hparams["weight_decay"]]
    for group, expected in ((plain_sgd, "on"), (decayed, "off")):
        planned = s.plan(group, Capacity.members(4), context(group, steps=1000))
        assert [len(g) for g, _ in planned] == [4]
        assert planned[0][1] == expected


GARBAGE = {"cut short": lambda good: good[:len(good) // 2],
           "not JSON": lambda good: "\x00\x01garbage",
           "no packs": lambda good: json.dumps({**json.loads(good), "packs": []}),
           "a list": lambda good: "[1, 2]"}


@pytest.mark.parametrize("where", ["run", "kept"])
@pytest.mark.parametrize("damage", GARBAGE)
def test_a_damaged_calibration_is_measured_again_with_one_warning(tmp_path, caplog, where,
                                                                   damage):
    from packexp.strategies import Device
    from packexp.strategies.calibration import calibration_digest, calibration_key

    good = {**device(plain=(2e-3, 1e-3, 1e-5)), "seconds": 1.0}
    record = {"key": calibration_key({"cpu": "x"}), "facts": {"cpu": "x"}, **good}
    kept_dir, run_dir = tmp_path / "kept", tmp_path / "run"
    bad = (run_dir if where == "run" else kept_dir) / (
        "calibration.json" if where == "run" else f"{record['key']}.json")
    bad.parent.mkdir(parents=True)
    bad.write_text(GARBAGE[damage](json.dumps(record)))
    run_dir.mkdir(exist_ok=True)
    measured = []
    place = Device(run_dir, facts=lambda: {"cpu": "x"},
                   measure=lambda: measured.append(1) or dict(good))
    s = CostStrategy(calibration_dir=str(kept_dir))
    with caplog.at_level(logging.WARNING):
        s.prepare(place)
    assert measured == [1]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith(f"calibration {bad}: ") and warning.endswith("; measuring again")
    # The plan is the measured calibration's, and the damaged file is replaced by it.
    assert s.calibration_used()["digest"] == calibration_digest(record)
    assert s.calibration_used()["source"] == "measured"
    assert json.loads(bad.read_text()) == record


def test_a_named_calibration_pins_the_plan_whatever_device_measured_it(tmp_path, caplog):
    from packexp.errors import ConfigError
    from packexp.strategies import Device
    from packexp.strategies.calibration import calibration_digest

    other = {"key": "0123456789abcdef", "facts": {"cpu": "elsewhere"},
             **device(plain=(2e-3, 1e-3, 1e-5))}
    pinned = tmp_path / "pinned.json"
    pinned.write_text(json.dumps(other))
    (tmp_path / "run").mkdir()
    place = Device(tmp_path / "run", facts=lambda: {"cpu": "here"},
                   measure=lambda: pytest.fail("measured"))
    s = CostStrategy(calibration_dir=None, calibration=str(pinned))
    with caplog.at_level(logging.WARNING):
        s.prepare(place)
    assert s.calibration_used() == {"key": "0123456789abcdef",
                                    "digest": calibration_digest(other), "source": "file",
                                    "path": str(pinned)}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"calibration {pinned} was measured for other facts (cpu differ); planning with it "
        "as named"]
    # A resume reads the run's copy, even if the named file has gone since.
    pinned.unlink()
    again = CostStrategy(calibration_dir=None, calibration=str(pinned))
    again.prepare(place)
    assert again.calibration_used()["digest"] == calibration_digest(other)
    assert again.calibration_used()["source"] == "run"
    # A named file that is missing or damaged is an error naming it, not a measurement.
    for content in (None, "{cut"):
        (tmp_path / "run" / "calibration.json").unlink(missing_ok=True)
        if content:
            pinned.write_text(content)
        with pytest.raises(ConfigError, match=rf"^strategy\.calibration={pinned}: {pinned}: "):
            CostStrategy(calibration_dir=None, calibration=str(pinned)).prepare(place)


def test_a_single_amortises_its_set_up_over_the_structures_only_when_finite():
    """The kept single serves the later trials of its structure: future_trials over the
    space's structures of them. Over endless structures it serves none."""
    s = strategy(device(plain=(1e-3, 1e-3, 0.0), plain_setup=(0.5, 0.0), fusion="off"))
    [t] = trials(1)
    alone = s.plan_cost([[t]], context([t], future_trials=0))[0]
    shared = s.plan_cost([[t]], context([t], future_trials=12, structures=4))[0]
    endless = s.plan_cost([[t]], context([t], future_trials=12, structures=math.inf))[0]
    assert endless == alone
    # Set-up 0.5 s shared by 1 + 12 / 4 singles.
    assert alone - shared == pytest.approx(0.5 * (1 - 1 / 4), abs=1e-9)


def test_a_calibration_kept_by_a_search_in_one_directory_serves_one_in_another(
        tmp_path, monkeypatch, caplog):
    """The default calibration_dir is packexp's home, whatever directory the command runs
    in; the first run says it calibrates, for how long at most and where it keeps it."""
    from packexp.strategies import Device
    from packexp.strategies.calibration import calibrating_line, calibration_key
    from packexp.testing.config import compose_config

    monkeypatch.setenv("PACKEXP_HOME", str(tmp_path / "home"))
    cfg = compose_config(["strategy=cost"], strategy=None)
    kept = []
    for where in ("a", "b"):
        (tmp_path / where / "run").mkdir(parents=True)
        monkeypatch.chdir(tmp_path / where)
        kept.append(cfg.strategy.calibration_dir)
    assert kept == [str(tmp_path / "home" / "calibration")] * 2
    measured = []
    good = {**device(plain=(2e-3, 1e-3, 1e-5)), "seconds": 1.0}
    for where in ("a", "b"):
        monkeypatch.chdir(tmp_path / where)
        caplog.clear()
        with caplog.at_level(logging.INFO, "packexp.strategies"):
            CostStrategy(calibration_dir=kept[0]).prepare(
                Device(tmp_path / where / "run", facts=lambda: {"cpu": "x"},
                       measure=lambda: measured.append(1) or dict(good)))
        said = [r.getMessage() for r in caplog.records if "calibrating" in r.getMessage()]
        assert said == ([calibrating_line(tmp_path / "home" / "calibration" /
                                          f"{calibration_key({'cpu': 'x'})}.json")]
                        if where == "a" else [])
    assert measured == [1]
    assert said == [] and "at most about 15 s" in calibrating_line(None)


def test_a_calibration_that_does_not_fit_its_time_plans_as_knn_and_says_so(tmp_path, caplog):
    """A fallback record (the calibration ran out of time before a pack of two): one warning
    naming what it plans as and why; kept, so the next run falls back without measuring."""
    from packexp.strategies import Device
    from packexp.strategies.knn import KnnStrategy

    why = "measuring a single took 21.3 s of the 15 s a calibration may take"
    measured = []

    def prepared(run: str) -> CostStrategy:
        (tmp_path / run).mkdir()
        s = CostStrategy(calibration_dir=str(tmp_path / "kept"))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            s.prepare(Device(tmp_path / run, facts=lambda: {"cpu": "x"}, measure=lambda: (
                measured.append(1) or {"fallback": "knn", "why": why, "seconds": 21.3})))
        return s

    for run, source in (("first", "measured"), ("second", "kept")):
        s = prepared(run)
        [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert line.startswith("strategy=cost plans as strategy=knn here (by distance, not "
                               f"measured costs): its calibration does not fit in 15 s on "
                               f"this device ({why}); ")
        assert s.calibration_used()["source"] == source
        ts = trials(12)
        capacity = Capacity.members(4)
        assert [g for g, _ in s.plan(ts, capacity, context(ts))] == KnnStrategy().pack(
            ts, capacity)
        assert s.predict(ts[:2], None, context(ts)) is None
    assert measured == [1]
