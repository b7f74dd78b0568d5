"""``executor=simulated``: the real driver on simulated workers and a simulated clock, on the
fake trainer. One simulated worker decides as the local executor does; several overlap their
packs in simulated time, each pack on a worker's lane; the cost models' arithmetic; and bad
settings refused in one line naming the key."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from packexp.app.tasks.tune import simulation_facts
from packexp.config import instantiate
from packexp.errors import ConfigError
from packexp.executors import SimulatedExecutor
from packexp.executors.durations import PackShape, StepTable
from packexp.runner import PackedSearch
from packexp.runner.journal import Journal
from packexp.schedulers import Asha, Hyperband, Scheduler
from packexp.space import Trial
from packexp.testing.calibration import device
from packexp.testing.config import compose_config
from packexp.testing.fake_trainer import FakeTrainer, fake_search, outcome

DURATIONS = {"step_s": {1: 0.1, 2: 0.15}, "setup_s": 1.0, "eval_s": 0.5}
POLICIES = [pytest.param(lambda: Hyperband(9, 3), id="hyperband"),
            pytest.param(lambda: Asha(9, 3, sample_size=4), id="asha")]


def search(run_dir: Path, policy: Scheduler, workers: int | None,
           durations: dict = DURATIONS) -> PackedSearch:
    """A search of the fake on the local executor (``workers`` None) or a simulated one."""
    trainer = FakeTrainer()
    found = fake_search(run_dir, trainer, policy.brackets(), executor=None if workers is None
                        else SimulatedExecutor(num_workers=workers, durations=durations,
                                               trainer=trainer))
    found.run(policy)
    found.finish()
    return found


def plans(run_dir: Path) -> list[dict]:
    return [r for r in Journal(run_dir).read() if r["event"] == "plan"]


def spans(found: PackedSearch) -> list[tuple[float, float, int]]:
    return [(p.started_s, p.started_s + p.duration_s, p.worker) for p in found.packs]


@pytest.mark.parametrize("make", POLICIES)
def test_one_simulated_worker_decides_as_the_local_executor(make, tmp_path):
    local = search(tmp_path / "local", make(), None)
    simulated = search(tmp_path / "simulated", make(), 1)
    assert outcome(simulated) == outcome(local)  # trials, rungs, scores, statuses
    assert ([(p.pack_id, p.members, p.bracket, p.rung, p.epochs) for p in simulated.packs]
            == [(p.pack_id, p.members, p.bracket, p.rung, p.epochs) for p in local.packs])
    assert plans(tmp_path / "simulated") == plans(tmp_path / "local")
    assert simulated.best() == local.best()
    # One worker: the packs follow each other on the simulated clock, end to end.
    ends = spans(simulated)
    assert all(w == 0 for _, _, w in ends)
    assert sorted(ends) == sorted(ends, key=lambda s: s[1])
    assert simulated.searched_s() == pytest.approx(sum(p.duration_s for p in simulated.packs),
                                                   abs=1e-3)


@pytest.mark.parametrize("make", POLICIES)
def test_several_simulated_workers_overlap_their_packs_on_the_simulated_clock(make, tmp_path):
    found = search(tmp_path, make(), 3)
    executor, packs = found.executor, found.packs
    lanes = spans(found)
    assert all(w in range(3) and p.host == "simulated" for (_, _, w), p in zip(lanes, packs,
                                                                               strict=True))
    assert any(a[0] < b[1] - 1e-9 and b[0] < a[1] - 1e-9 for i, a in enumerate(lanes)
               for b in lanes[i + 1:])  # some packs train at once
    for worker in range(3):  # but a worker trains one pack at a time
        own = sorted((s, e) for s, e, w in lanes if w == worker)
        assert all(e <= s2 + 1e-6 for (_, e), (s2, _) in itertools.pairwise(own))
    moments = sorted({s for s, _, _ in lanes})
    assert max(sum(s <= t < e for s, e, _ in lanes) for t in moments) <= 3
    total = sum(p.duration_s for p in packs)
    wall = found.searched_s()
    assert wall < total
    assert wall == pytest.approx(max(e for _, e, _ in lanes), abs=1e-3)
    usage = executor.usage()
    assert usage["workers"] == 3
    assert usage["busy_s"] == pytest.approx(total, abs=1e-2)
    assert usage["span_s"] == pytest.approx(wall, abs=1e-3)
    assert 0 <= usage["idle_fraction"] < 1
    result = found.study.result(wall_time_s=wall, workers=usage,
                                **simulation_facts(executor, found.first_pack_at)).to_json()
    assert result["simulated"] is True and result["wall_time_s"] == round(wall, 3)
    assert result["simulation"] == {"workers": 3, "durations": {**DURATIONS, "switch_s": 0.0}}
    assert 0 <= result["real_wall_time_s"] < wall
    assert json.loads(json.dumps(result))["packs"][0]["worker"] in range(3)


def test_a_simulated_search_times_the_same_whatever_the_machine(tmp_path):
    first = search(tmp_path / "a", Asha(9, 3, sample_size=4), 4)
    again = search(tmp_path / "b", Asha(9, 3, sample_size=4), 4)
    assert spans(first) == spans(again)
    assert first.searched_s() == again.searched_s()


def test_a_pack_takes_its_steps_at_the_step_time_of_the_members_still_training(tmp_path):
    found = search(tmp_path, Hyperband(9, 3), 2)
    pack = found.packs[0]  # two fresh members of batch 10 on 100 rows, one epoch: 10 steps each
    assert pack.steps == 10 and len(pack.members) == 2
    assert pack.train_s == pytest.approx(10 * 0.15)
    assert pack.duration_s == pytest.approx(1.0 + 10 * 0.15 + 2 * 0.5)
    assert (pack.build_s, pack.eval_s, pack.step_time_ms) == (1.0, 1.0, pytest.approx(150))


def test_a_step_table_interpolates_and_extrapolates_by_member_count():
    table = StepTable({1: 0.2, 2: 0.25, 4: 0.4})
    assert [table.step(n) for n in (1, 2, 3, 4, 6)] == pytest.approx([0.2, 0.25, 0.325, 0.4,
                                                                      0.55])
    assert StepTable({2: 0.3}).step(1) == pytest.approx(0.15)
    assert StepTable({1: 0.2}).step(3) == pytest.approx(0.6)  # no gain from packing
    assert StepTable({1: 0.2, 2: 0.1}).step(4) == pytest.approx(0.1)  # never less than the last


def test_members_whose_steps_are_spent_leave_the_pack_and_each_rebuild_costs_a_switch():
    table = StepTable({1: 1.0, 2: 1.5, 3: 2.0}, setup_s=3.0, switch_s=0.5, eval_s=0.25)
    group = [Trial(f"t{i}", {"batch_size": 10}, ()) for i in range(3)]
    predicted = table.predict(PackShape(group, [10, 20, 40], [5, 10, 10], None, 3, False), set())
    # 5 steps of three, then 5 of the two left; one rebuild (the two end together)
    assert predicted.train_s == pytest.approx(5 * 2.0 + 5 * 1.5)
    assert (predicted.switches, predicted.switch_s, predicted.steps) == (1, 0.5, 10)
    assert predicted.total_s == pytest.approx(3.0 + 17.5 + 0.5 + 0.75)


def test_a_calibrations_cost_model_sets_a_structure_up_once_per_worker(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(device(plain=(1e-3, 1e-3, 0.0), plain_setup=(0.1, 0.05))))
    executor = SimulatedExecutor(num_workers=1, calibration=str(path), trainer=FakeTrainer())
    group = [Trial(f"t{i}", {"batch_size": 16, "optimizer": "adam"}, ()) for i in range(2)]
    shape = PackShape(group, [16, 16], [100, 100], "off", 2, False)
    set_up: set[tuple] = set()
    first, second = (executor.cost.predict(shape, set_up) for _ in range(2))
    assert first.train_s == pytest.approx(executor.cost.model.train_s([16, 16], [100, 100],
                                                                      "off"))
    assert first.setup_s - second.setup_s == pytest.approx(0.1 + 0.05 * 2)  # traced once
    assert executor.settings() == {"workers": 1, "calibration": str(path)}


@pytest.mark.parametrize(("settings", "message"), [
    ({"num_workers": 0}, "executor.num_workers=0: must be an integer >= 1"),
    ({"num_workers": True}, "executor.num_workers=True: must be an integer >= 1"),
    ({"durations": None}, "executor.durations: missing; give step_s, a pack step's seconds by "
                          "its member count ({1: 0.2, 2: 0.25}), or executor.calibration=<a "
                          "calibration file>"),
    ({"durations": {"setup_s": 1.0}}, "executor.durations.step_s: missing; give a pack step's "
                                      "seconds by its member count ({1: 0.2, 2: 0.25})"),
    ({"durations": {"step_s": {1: 0.2, 2: -0.1}}},
     "executor.durations.step_s.2=-0.1: must be a positive number of seconds"),
    ({"durations": {"step_s": {1: 0}}},
     "executor.durations.step_s.1=0: must be a positive number of seconds"),
    ({"durations": {"step_s": {0: 0.2}}},
     "executor.durations.step_s: 0 is not a member count (an integer >= 1)"),
    ({"durations": {"step_s": {1: 0.2}, "setup_s": -1}},
     "executor.durations.setup_s=-1: must be a number >= 0 of seconds"),
    ({"durations": {"step_s": {1: 0.2}, "eval_s": None}},
     "executor.durations.eval_s=None: must be a number >= 0 of seconds"),
    ({"durations": {"step_s": {1: 0.2}, "setup": 1}},
     "executor.durations.setup: unknown key; the keys are step_s, setup_s, switch_s, eval_s"),
    ({"calibration": "nonesuch.json"},
     "executor.calibration=nonesuch.json: no such file (a strategy=cost run's calibration.json,"
     " or one under its strategy.calibration_dir)"),
], ids=["zero", "bool", "no_durations", "no_step", "negative_step", "zero_step", "count",
        "negative_setup", "null_eval", "unknown", "calibration"])
def test_a_bad_setting_is_refused_in_one_line_naming_its_key(settings, message):
    with pytest.raises(ConfigError) as info:
        SimulatedExecutor(**{"durations": DURATIONS, **settings}, trainer=FakeTrainer())
    assert str(info.value) == message


def test_the_config_refuses_a_bad_setting_before_the_search_starts(tmp_path):
    cfg = compose_config(["executor=simulated", "executor.num_workers=0"])
    with pytest.raises(ConfigError, match=r"^executor.num_workers=0: must be an integer >= 1$"):
        instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=tmp_path)
    cfg = compose_config(["executor=simulated", "executor.durations.step_s.2=-1"])
    with pytest.raises(ConfigError, match=r"^executor.durations.step_s.2=-1: must be a positive"):
        instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=tmp_path)
    cfg = compose_config(["executor=simulated", "~executor.durations.step_s"])
    with pytest.raises(ConfigError, match=r"^executor.durations.step_s: missing; "):
        instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=tmp_path)


def test_the_config_simulates_on_the_fake_trainer_with_the_papers_table(tmp_path):
    cfg = compose_config(["executor=simulated", "executor.num_workers=64"])
    executor = instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=tmp_path)
    assert executor.simulated and executor.workers == 64 and executor.free() == 64
    assert isinstance(executor.trainer, FakeTrainer) and executor.trainer.failing is None
    assert executor.trainer.members == cfg.pack.max_members
    assert executor.settings()["durations"]["step_s"] == {1: 0.195, 2: 0.2}
    cfg = compose_config(["executor=simulated", "executor.durations.step_s.2=0.21",
                          "+executor.durations.step_s.8=0.3"])  # a count set, one added
    executor = instantiate(cfg.executor, "executor")(cfg=cfg, run_dir=tmp_path)
    assert executor.cost.step_s == {1: 0.195, 2: 0.21, 8: 0.3}
    assert executor.clock() == 0.0
