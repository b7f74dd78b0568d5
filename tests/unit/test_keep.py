"""Which trained models a search keeps (``runner.keep``), pure: the same choice as the book's
best and front, and every finally kept result a candidate when it was scored."""

from __future__ import annotations

import random

import pytest

from packexp.objectives import ACCURACY, Objective
from packexp.records.record import RungResult
from packexp.records.search_result import SearchResult
from packexp.runner.keep import BEST, KeepModels, keep_setting
from packexp.runner.study import Study
from packexp.space import Trial

PARETO = Objective(metrics=[{"name": "val_accuracy", "mode": "max"},
                            {"name": "val_loss", "mode": "min"}])


def result(trial_id: str, rung: int, accuracy: float | None, loss: float | None = 1.0,
           failed: bool = False) -> RungResult:
    return RungResult(trial_id, 0, rung, float(3 ** rung), 10 * 3 ** rung, accuracy, loss,
                      None, f"p{rung}", None, failed)


def book_of(objective: Objective, trials: int) -> Study:
    book = Study(None, objective)
    book.add_trials(0, [Trial(f"t{i}", {"lr": i}, ()) for i in range(trials)])
    return book


def test_the_best_is_the_book_s_best_of_two_as_good_the_later_epoch():
    book = book_of(ACCURACY, 3)
    book.leaders.widen(3)
    for r in (result("t0", 0, 0.9), result("t1", 0, 0.5), result("t0", 1, 0.8),
              result("t1", 1, 0.9), result("t2", 0, None, None, failed=True)):
        book.restore(r)
    chosen = KeepModels(BEST, ACCURACY).chosen(book)
    best = book.best()
    assert list(chosen) == [best.trial_id] == ["t1"]
    assert chosen["t1"].epochs == best.epochs == 3
    top = KeepModels(3, ACCURACY).chosen(book)
    assert [(t, r.rung) for t, r in top.items()] == [("t1", 1), ("t0", 0)]  # t2 never scored
    assert KeepModels("none", ACCURACY).chosen(book) == {}


@pytest.mark.parametrize("objective", [ACCURACY, PARETO], ids=["one", "several"])
@pytest.mark.parametrize("which", [BEST, 2])
def test_every_result_kept_at_the_end_was_a_candidate_when_it_was_scored(objective, which):
    """Results arrive a pack at a time in a random order: the states written as they come
    (``candidates``), less those dropped after each pack (``wanted``), always hold the final
    choice's; the one kept is the book's best (one objective) or its front (several)."""
    keep = KeepModels(which, objective)
    for seed in range(40):
        draw = random.Random(seed)
        book = book_of(objective, 6)
        book.leaders.widen(keep.top_k)
        pending = [result(f"t{t}", rung, round(draw.random(), 1), round(draw.random(), 1),
                          failed=draw.random() < 0.1)
                   for rung in range(3) for t in range(6)]
        written: set[tuple[str, int]] = set()
        while pending:
            pack = [pending.pop(0) for _ in range(min(len(pending), draw.randint(1, 3)))]
            written |= {(r.trial_id, r.rung) for r in keep.candidates(book, pack)}
            for r in pack:
                book.restore(r)
            wanted, among = keep.wanted(book, [r.trial_id for r in pack])
            written = {w for w in written if (among is not None and w[0] not in among)
                       or w in wanted}
        chosen = keep.chosen(book)
        assert {(t, r.rung) for t, r in chosen.items()} <= written, seed
        if which == BEST and objective is ACCURACY and (best := book.best()):
            assert [(t, r.epochs) for t, r in chosen.items()] == [(best.trial_id, best.epochs)]
        if which == BEST and objective is PARETO:
            assert list(chosen) == [e["trial_id"] for e in book.front()]


def test_under_several_objectives_the_best_model_is_the_front_s_best_on_the_first_goal():
    """``best`` may be a rung whose weights the front does not keep (its trial scored worse
    later): the model that stands for it is the front's kept one best on the first goal."""
    results = {"objective": PARETO.to_dict(), "trials": [], "packs": [],
               "best": {"trial_id": "t0", "hparams": {}, "epochs": 1, "val_accuracy": 0.95},
               "pareto_front": [
                   {"trial_id": "t1", "hparams": {}, "epochs": 3, "val_accuracy": 0.90,
                    "val_loss": 0.3, "model": "models/t1.keras"},
                   {"trial_id": "t0", "hparams": {}, "epochs": 3, "val_accuracy": 0.94,
                    "val_loss": 0.5, "model": "models/t0.keras"},
                   {"trial_id": "t2", "hparams": {}, "epochs": 3, "val_accuracy": 0.80,
                    "val_loss": 0.1}]}
    assert best_kept(results).model == "models/t0.keras"
    assert best_kept(results).values == {"val_accuracy": 0.94, "val_loss": 0.5}
    results["best"]["model"] = "models/t0.keras"
    assert best_kept(results) == SearchResult.from_json("run", results).best
    assert best_kept({**results, "best": None, "pareto_front": []}) is None


def best_kept(results):
    return SearchResult.from_json("run", results).best_kept()


@pytest.mark.parametrize("value", ["all", 0, -1, True, None, 1.5])
def test_a_bad_setting_names_the_key(value):
    with pytest.raises(ValueError, match="keep_models="):
        keep_setting(value)


def test_good_settings():
    assert [keep_setting(v) for v in ("best", "front", "none", 3)] == ["best", "best", "none", 3]
