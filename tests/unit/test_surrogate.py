"""Narrow stand-ins (``packexp.surrogate``): muP's rules against its tables, the settings'
checks, and the transfer: the best stand-ins trained again at full width as the search's last
step, the best theirs, a resume between the two the same as an unbroken run. Pure Python."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packexp.config.settings import surrogate_of
from packexp.errors import ConfigError
from packexp.objectives import Objective
from packexp.records.transfer import Transferred, rank_correlation
from packexp.runner.budget import Budget
from packexp.runner.journal import Journal
from packexp.samplers.tpe import TpeSampler
from packexp.schedulers import Asha, Hyperband, Pbt
from packexp.surrogate import SCALE_KEY, Surrogate, is_full
from packexp.surrogate.rules import (
    FIXED,
    HIDDEN,
    VECTOR,
    adaptive_rate,
    init_factor,
    readout_multiplier,
    role,
    sgd_rate,
)
from packexp.surrogate.transfer import BRACKET, Transfer
from packexp.testing.fake_trainer import FakeTrainer, fake_search, outcome

# A stand-in 8 times narrower than an MLP of width 512 on 40 features and 10 classes: Keras's
# shapes of its input kernel, hidden kernel, bias, readout kernel and readout bias.
FULL = {"input": (40, 512), "hidden": (512, 512), "bias": (512,), "readout": (512, 10),
        "readout_bias": (10,), "conv": (3, 3, 64, 128), "attention": (512, 8, 64)}
NARROW = {"input": (40, 64), "hidden": (64, 64), "bias": (64,), "readout": (64, 10),
          "readout_bias": (10,), "conv": (3, 3, 8, 16), "attention": (64, 8, 8)}


@pytest.mark.parametrize(("weight", "kind", "adam", "sgd"), [
    # muP (Tensor Programs V, Table 3; mup's MuAdam and MuSGD) with width_mult m = 1/8:
    # Adam divides a hidden matrix's rate by m; SGD multiplies a vector-like weight's by m
    # and keeps a hidden one's (fan-out and fan-in scale alike); nothing else changes.
    ("input", VECTOR, 1.0, 1 / 8), ("hidden", HIDDEN, 8.0, 1.0), ("bias", VECTOR, 1.0, 1 / 8),
    ("readout", VECTOR, 1.0, 1 / 8), ("readout_bias", FIXED, 1.0, 1.0),
    ("conv", HIDDEN, 8.0, 1.0), ("attention", HIDDEN, 8.0, 1.0),
])
def test_each_weight_takes_mup_s_learning_rate_multipliers(weight, kind, adam, sgd):
    r = role(FULL[weight], NARROW[weight], weight)
    assert r.kind == kind
    assert adaptive_rate(r) == pytest.approx(adam) and sgd_rate(r) == pytest.approx(sgd)


@pytest.mark.parametrize(("rule", "hparams", "normalised"), [
    ("adam", {}, 1.0), ("sgd", {}, 0.0), ("momentum", {}, 0.0),
    ("adagrad", {}, 0.0),  # Keras's accumulator starts at 0.1: SGD-like while gradients are small
    ("adagrad", {"initial_accumulator_value": 0.0}, 1.0),  # PyTorch's: entrywise normalised
])
def test_each_rule_takes_the_adam_like_or_the_sgd_like_rates(rule, hparams, normalised):
    from packexp import optim

    assert optim.coefficients(rule, hparams).normalised == normalised


def test_at_full_width_every_multiplier_is_one():
    for shape in FULL.values():
        r = role(shape, shape)
        assert (r.kind, adaptive_rate(r), sgd_rate(r), readout_multiplier(r)) == (FIXED, 1, 1, 1)
        assert init_factor(shape, shape, r, "fan_avg") == 1.0


def test_the_readout_s_input_is_multiplied_by_the_inverse_width_multiplier():
    r = role(FULL["readout"], NARROW["readout"])
    assert r.width_axis == "in" and readout_multiplier(r) == pytest.approx(8.0)
    assert role(FULL["input"], NARROW["input"]).width_axis == "out"


def test_a_stand_in_starts_as_mup_has_it_with_the_full_model_as_base():
    # Glorot (fan_avg): a hidden square layer's own init is muP's already; the input and the
    # readout kernels keep the full model's variance (mup's sqrt(width_mult) for the readout).
    hidden = role(FULL["hidden"], NARROW["hidden"])
    assert init_factor(FULL["hidden"], NARROW["hidden"], hidden, "fan_avg") == pytest.approx(1.0)
    r = role(FULL["input"], NARROW["input"])
    assert init_factor(FULL["input"], NARROW["input"], r, "fan_avg") == pytest.approx(
        math.sqrt((40 + 64) / (40 + 512)))
    r = role(FULL["readout"], NARROW["readout"])
    assert init_factor(FULL["readout"], NARROW["readout"], r, "fan_in") == pytest.approx(
        math.sqrt(1 / 8))
    with pytest.raises(ValueError, match="mode='uniform'"):
        init_factor(FULL["input"], NARROW["input"], r, "uniform")


@pytest.mark.parametrize(("full", "narrow", "says"), [
    ((512, 512), (64,), "not the same weight"), ((64, 64), (512, 64), "wider"),
    ((8, 8, 8), (4, 4, 4), "3 of its dimensions"),
])
def test_a_shape_muP_has_no_rule_for_is_refused_naming_the_weight(full, narrow, says):
    with pytest.raises(ValueError, match=says) as e:
        role(full, narrow, "dense/kernel")
    assert str(e.value).startswith("dense/kernel: ") and "\n" not in str(e.value)


@pytest.mark.parametrize(("node", "says"), [
    ({"scale": 0}, "surrogate.scale=0: must be an integer >= 1"),
    ({"scale": 2.5}, "surrogate.scale=2.5"), ({"transfer": 0}, "surrogate.transfer=0"),
    ({"readout_zero_init": "yes"}, "surrogate.readout_zero_init='yes'"),
    ({"width": 4}, "surrogate.width: no such setting"),
])
def test_a_bad_surrogate_setting_is_one_line_naming_its_key(node, says):
    with pytest.raises(ConfigError, match=says.replace(".", r"\.").replace("(", r"\(")):
        surrogate_of(OmegaConf.create({"surrogate": node}))


def test_the_default_is_off_and_a_trial_is_full_width_unless_a_stand_in():
    off = surrogate_of(OmegaConf.create({}))
    assert off == Surrogate() and not off.on and is_full({}, off)
    on = Surrogate(scale=4)
    assert not is_full({}, on) and is_full({SCALE_KEY: 1}, on)


def test_a_population_scheduler_is_refused_its_best_is_a_schedule():
    with pytest.raises(ConfigError, match=r"surrogate\.scale: scheduler PBT makes exploits"):
        Transfer(Pbt(population=4, interval=1, epochs=4))


def transfer_search(run_dir: Path, trainer: FakeTrainer, k: int = 3, inner=None,
                    searched_s=None, **settings):
    policy = Transfer(inner or Hyperband(9, 3), k)
    search = fake_search(run_dir, trainer, brackets=policy.brackets(),
                         surrogate=Surrogate(scale=4, transfer=k), **settings)
    if searched_s is not None:  # the search's clock, as a function of the search
        search.searched_s = lambda: searched_s(search)
    search.run(policy)
    search.finish()
    return search


def test_the_best_stand_ins_train_again_at_full_width_as_the_search_s_last_step(
        tmp_path, fake_trainer):
    search = transfer_search(tmp_path, fake_trainer)
    plans = [r for r in Journal(tmp_path).read() if r["event"] == "plan"]
    assert plans[-1]["bracket"] == BRACKET and plans[-1]["key"] == "transfer"
    transfer = sum(p.pack_id.startswith("transfer-") for p in search.packs)
    full = [i for call in fake_trainer.calls[-transfer:] for i in call["ids"]]  # the last packs
    assert sorted(full) == sorted(i for i in search.trials if i.startswith("full-"))
    assert len(full) == 3
    stand_ins = {i: t for i, t in search.trials.items() if not i.startswith("full-")}
    # The transferred are the three stand-ins best at their best rung, each with its values
    # at full width and its seed.
    ranked = sorted(stand_ins, key=lambda i: max(
        (r.val_accuracy, r.epochs) for r in stand_ins[i].rungs if r.val_accuracy is not None)
        if any(r.val_accuracy is not None for r in stand_ins[i].rungs) else (-1, 0),
        reverse=True)[:3]
    assert sorted(full) == sorted(f"full-{i}" for i in ranked)
    for i in full:
        assert search.trials[i].hparams == {**stand_ins[i[5:]].hparams, SCALE_KEY: 1}
        assert [r.epochs for r in search.trials[i].rungs] == [9.0]
        assert search.trials[i].status == "finished"
    best = search.best()
    assert best is not None and best.trial_id.startswith("full-")  # a stand-in never is


def test_a_resume_between_the_stand_ins_and_the_transfer_ends_as_an_unbroken_run(
        tmp_path, fake_trainer):
    whole = transfer_search(tmp_path / "whole", fake_trainer)
    calls = len(fake_trainer.calls)
    for die in (calls - 2, calls - 1):  # at the transfer's first pack, and at its last
        fake_trainer.die_at_call, fake_trainer.calls = die, []
        run_dir = tmp_path / f"killed{die}"
        with pytest.raises(KeyboardInterrupt):
            transfer_search(run_dir, fake_trainer)
        fake_trainer.die_at_call, fake_trainer.calls = None, []
        resumed = transfer_search(run_dir, fake_trainer)
        assert all(i.startswith("full-") for c in fake_trainer.calls for i in c["ids"])
        leave_out = ("checkpoint", "pack_id")
        assert outcome(resumed, leave_out) == outcome(whole, leave_out)
        assert resumed.best() == whole.best()


def test_the_rank_correlation_reads_whether_the_transfer_held():
    pairs = [Transferred(f"t{i}", f"full-t{i}", s, f, 9.0, 9.0)
             for i, (s, f) in enumerate([(0.5, 0.6), (0.4, 0.55), (0.3, 0.2)])]
    assert rank_correlation(pairs) == pytest.approx(1.0)
    flipped = [Transferred(p.stand_in, p.full, -p.stand_in_value, p.full_value, 9.0, 9.0)
               for p in pairs]
    assert rank_correlation(flipped) == pytest.approx(-1.0)
    assert rank_correlation(pairs[:1]) is None


def test_asha_s_search_over_stand_ins_ends_with_its_best_at_full_width(tmp_path, fake_trainer):
    search = transfer_search(tmp_path, fake_trainer, k=2, inner=Asha(9, 3, num_configs=12))
    full = [i for i in search.trials if i.startswith("full-")]
    assert len(full) == 2 and list(search.trials)[-2:] == full  # drawn last
    assert all([r.epochs for r in search.trials[i].rungs] == [9.0] for i in full)
    assert search.best().trial_id in full


def stand_ins_of(search) -> dict:
    return {i: v for i, v in outcome(search, ("checkpoint", "pack_id")).items()
            if not i.startswith("full-")}


def best_stand_ins(search, k: int) -> list[str]:
    scored = {i: max((r.val_accuracy, r.epochs) for r in t.rungs if r.val_accuracy is not None)
              for i, t in search.trials.items()
              if not i.startswith("full-") and any(r.val_accuracy is not None for r in t.rungs)}
    return sorted(scored, key=scored.__getitem__, reverse=True)[:k]


@pytest.mark.parametrize("budget", ["trials", "time"])
def test_a_budget_s_stop_still_trains_the_best_so_far_at_full_width(
        tmp_path, fake_trainer, budget):
    # The trials budget stops before Hyperband's second bracket; the time budget once the
    # first pack is in, with other packs of its rung still queued.
    limits = ({"budget": Budget(trials=9)} if budget == "trials" else
              {"budget": Budget(time_s=60), "searched_s": lambda s: 100.0 if s.packs else 0.0})
    search = transfer_search(tmp_path, fake_trainer, **limits)
    assert search.stopped is not None and search.stopped.startswith(f"budget.{budget}")
    full = [i for i in search.trials if i.startswith("full-")]
    assert sorted(full) == sorted(f"full-{i}" for i in best_stand_ins(search, 3))
    assert all([r.epochs for r in search.trials[i].rungs] == [9.0] for i in full)
    assert search.best().trial_id in full  # the budget still hands over a full model
    plans = [r for r in Journal(tmp_path).read() if r["event"] == "plan"]
    assert plans[-1]["key"] == "transfer-stop1"


def test_a_resume_past_a_budget_s_transfer_goes_on_with_the_stand_ins(tmp_path, fake_trainer):
    whole = transfer_search(tmp_path / "whole", fake_trainer)
    first = transfer_search(tmp_path / "run", fake_trainer, budget=Budget(trials=9))
    closing = {i for i in first.trials if i.startswith("full-")}
    assert first.stopped and len(closing) == 3
    fake_trainer.calls = []
    resumed = transfer_search(tmp_path / "run", fake_trainer)  # no budget: to its end
    assert resumed.stopped is None
    # The stand-ins' search is the unbroken run's; its last step trains those of its best
    # the budget's closing step did not, none twice.
    assert stand_ins_of(resumed) == stand_ins_of(whole)
    best = {f"full-{i}" for i in best_stand_ins(whole, 3)}
    trained_now = [i for c in fake_trainer.calls for i in c["ids"] if i.startswith("full-")]
    assert sorted(trained_now) == sorted(best - closing)
    assert {i for i in resumed.trials if i.startswith("full-")} == closing | best
    assert resumed.best().trial_id in closing | best


def test_tpe_s_search_over_stand_ins_learns_from_the_stand_ins_and_ends_at_full_width(
        tmp_path, fake_trainer):
    search = transfer_search(tmp_path, fake_trainer, sampler=TpeSampler(min_points=3))
    full = [i for i in search.trials if i.startswith("full-")]
    assert sorted(full) == sorted(f"full-{i}" for i in best_stand_ins(search, 3))
    assert list(search.trials)[-3:] == full and search.best().trial_id in full


def test_a_pareto_front_over_stand_ins_holds_full_width_trials_only(tmp_path, fake_trainer):
    objective = Objective(metrics=[{"name": "val_accuracy", "mode": "max"},
                                   {"name": "val_loss", "mode": "max"}])  # a trade-off
    search = transfer_search(tmp_path, fake_trainer, objective=objective)
    front = search.study.front()
    assert front and all(p.trial_id.startswith("full-") for p in front)
    assert len([i for i in search.trials if i.startswith("full-")]) == 3
