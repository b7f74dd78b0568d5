from __future__ import annotations

import math

import pytest

from packexp.schedulers import Hyperband, Planned, Retire, keep_best
from packexp.space import SearchSpace, Trial
from packexp.testing.policies import simulate


def table(R: int, eta: int) -> list[list[tuple[int, float]]]:
    return [[(r.n, r.r) for r in b.rungs] for b in Hyperband(R, eta).brackets()]


def test_r81_eta3_matches_li_et_al():
    assert table(81, 3) == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]
    brackets = Hyperband(81, 3).brackets()
    assert [b.rungs[0].n for b in brackets] == [81, 34, 15, 8, 5]
    assert sum(b.rungs[0].n for b in brackets) == 143
    assert sum(r.n for b in brackets for r in b.rungs) == 206


@pytest.mark.parametrize(("R", "eta", "s_max"), [(1, 3, 0), (2, 3, 0), (3, 3, 1), (8, 2, 3),
                                                  (9, 3, 2), (26, 3, 2), (27, 3, 3),
                                                  (243, 3, 5), (1000, 10, 3)])
def test_s_max_is_exact_integer_log(R, eta, s_max):
    # float log(243, 3) is 4.999...; integer arithmetic must not be off by one.
    assert Hyperband(R, eta).s_max == s_max


def test_r27_eta3():
    assert table(27, 3) == [
        [(27, 1), (9, 3), (3, 9), (1, 27)],
        [(12, 3), (4, 9), (1, 27)],
        [(6, 9), (2, 27)],
        [(4, 27)],
    ]


def test_non_power_r_gives_fractional_epochs():
    hb = Hyperband(10, 3)
    assert hb.s_max == 2
    assert hb.brackets()[0].rungs[0].r == pytest.approx(10 / 9)
    assert hb.brackets()[-1].rungs[-1].r == 10


@pytest.mark.parametrize(("R", "eta", "match"), [(0, 3, "R=0"), (9, 1, "eta=1"),
                                                  (9.5, 3, "R=9.5"), ("9", 3, "R='9'"),
                                                  (True, 3, "R=True")])
def test_bad_inputs_name_the_key(R, eta, match):
    with pytest.raises(ValueError, match=match):
        Hyperband(R, eta)


def trials(n: int) -> list[Trial]:
    return [Trial(f"t{i}", {"i": i}, (float(i),)) for i in range(n)]


def test_keep_best_keeps_the_highest_scores():
    ts = trials(5)
    scores = {"t0": 0.1, "t1": 0.9, "t2": 0.5, "t3": 0.7, "t4": 0.2}
    assert [t.trial_id for t in keep_best(ts, scores, 2)] == ["t1", "t3"]


def test_keep_best_ranks_failed_last_and_breaks_ties_by_order():
    ts = trials(5)
    scores = {"t0": None, "t1": math.nan, "t2": 0.5, "t3": 0.5, "t4": 0.0}
    assert [t.trial_id for t in keep_best(ts, scores, 4)] == ["t2", "t3", "t4", "t0"]


def test_the_policy_promotes_the_best_through_every_rung():
    space = SearchSpace({"x": list(range(100))})
    hb = Hyperband(9, 3)
    made = simulate(hb, space, lambda t, epochs: float(t.hparams["x"]))  # larger x: higher
    seen = [(p.bracket, p.rung, [t.hparams["x"] for t in p.trials],
             hb.bracket(p.bracket).rungs[p.rung].r) for p in made if isinstance(p, Planned)]
    assert [(s, r, len(xs), e) for s, r, xs, e in seen] == [
        (2, 0, 9, 1), (2, 1, 3, 3), (2, 2, 1, 9), (1, 0, 5, 3), (1, 1, 1, 9), (0, 0, 3, 9)]
    killed = [m.trial_id for m in made if isinstance(m, Retire) and m.status == "killed"]
    finished = [m.trial_id for m in made if isinstance(m, Retire) and m.status == "finished"]
    assert len(killed) == 6 + 2 + 4 and len(finished) == 1 + 1 + 3
    first = seen[0][2]
    assert sorted(seen[1][2]) == sorted(first)[-3:]
    assert seen[2][2] == [max(first)]
