"""The configurations a search draws (``packexp/runner/draws.py``): a bracket's told the
brackets before it, an asynchronous plan's told every result and numbered in the order drawn,
a resumed plan's known again, none drawn twice while a finite space has others; and what a
sampler learns from (``observed``), scored by the objective."""

from __future__ import annotations

import logging

from packexp.events import RungResult, TrialRecord
from packexp.objectives import ACCURACY, Objective
from packexp.runner.draws import Draws, observed
from packexp.runner.settings import SearchContext
from packexp.runner.study import Study
from packexp.samplers import Observation, Sampler
from packexp.space import SearchSpace
from packexp.strategies import Capacity
from packexp.testing.fake_trainer import HYPERBAND, SPACE, InOrder, fake_search

LOSS = Objective("val_loss", "min")


class Noting(Sampler):
    """Samples as the default sampler does; notes what each draw was told."""

    def __init__(self) -> None:
        self.told: list[tuple[int, list[Observation], list[dict]]] = []

    def sample(self, space, n, seed, bracket, history, drawn=()):
        self.told.append((bracket, list(history), [dict(d) for d in drawn]))
        return super().sample(space, n, seed, bracket, history, drawn)


def scored(trial_id: str, bracket: int, val_accuracy: float | None,
           val_loss: float | None = None, epochs: float = 1.0) -> RungResult:
    return RungResult(trial_id, bracket, 0, epochs, 10, val_accuracy, val_loss, None, "p", None,
                      failed=val_accuracy is None)


def values(trials) -> list[tuple]:
    return [tuple(sorted(t.hparams.items())) for t in trials]


def test_a_sampler_learns_from_scores_where_higher_is_better(tmp_path, fake_trainer):
    search = fake_search(tmp_path, fake_trainer, objective=LOSS)
    search.run(HYPERBAND)
    seen = observed(search.trials.values(), LOSS)
    assert seen and all(o.score == -o.hparams["x"] / 50 for o in seen)


def test_observed_is_every_scored_rung_in_order_by_the_objective():
    a = TrialRecord("a", {"x": 1}, 0, rungs=[scored("a", 0, 0.2, 0.4),
                                             scored("a", 0, 0.3, 0.25, epochs=3.0)])
    b = TrialRecord("b", {"x": 2}, 0, rungs=[scored("b", 0, None)])  # diverged: no score
    assert observed([a, b], ACCURACY) == [Observation({"x": 1}, 1.0, 0.2),
                                          Observation({"x": 1}, 3.0, 0.3)]
    assert observed([b, a], LOSS) == [Observation({"x": 1}, 1.0, -0.4),
                                      Observation({"x": 1}, 3.0, -0.25)]


def test_a_bracket_s_draw_is_told_the_scored_rungs_of_the_brackets_before_it():
    sampler, study = Noting(), Study()
    draws = Draws(context(SPACE), sampler, study)
    brackets = HYPERBAND.brackets()
    b2, b1, b0 = brackets  # in the order they run
    first = draws.bracket(b2, brackets)
    assert [t.trial_id for t in first] == [f"b2-t{i:03d}" for i in range(9)]
    assert {t.trial_id: study.trials[t.trial_id].bracket for t in first} == {
        t.trial_id: 2 for t in first}
    study.restore(scored(first[0].trial_id, 2, 0.3))
    study.restore(scored(first[1].trial_id, 2, None))
    second = draws.bracket(b1, brackets)
    study.restore(scored(second[0].trial_id, 1, 0.6))
    third = draws.bracket(b0, brackets)
    (s2, h2, d2), (s1, h1, d1), (s0, h0, d0) = sampler.told
    assert (s2, h2, d2) == (2, [], [])  # the first bracket knows nothing
    assert (s1, h1) == (1, [Observation(dict(first[0].hparams), 1.0, 0.3)])
    assert d1 == [dict(t.hparams) for t in first]
    assert (s0, h0) == (0, [*h1, Observation(dict(second[0].hparams), 1.0, 0.6)])
    assert d0 == [dict(t.hparams) for t in first + second]
    assert len(set(values(first + second + third))) == 9 + 5 + 3  # none drawn twice
    # Drawn again (a resumed run replays every bracket's results): the same configurations.
    again = Draws(context(SPACE), Noting(), Study())
    assert values(again.bracket(b2, brackets)) == values(first)


def test_a_space_smaller_than_a_bracket_gives_what_it_has_and_says_so(caplog):
    tiny = SearchSpace({"x": [0, 1, 2], "batch_size": [10]})
    study = Study()
    draws = Draws(context(tiny), Sampler(), study)
    caplog.set_level(logging.WARNING, logger="packexp.runner.draws")
    got = draws.bracket(HYPERBAND.brackets()[0], HYPERBAND.brackets())
    assert sorted(t.hparams["x"] for t in got) == [0, 1, 2] and len(study.trials) == 3
    assert "bracket 2 wants 9 configurations; the space has only 3" in caplog.text


def test_more_numbers_its_draws_in_order_told_every_result_and_none_drawn_twice():
    sampler, study = Noting(), Study()
    draws = Draws(context(SPACE), sampler, study)
    first = draws.more(3, salt=0, first=0)
    assert [(t.trial_id, t.bracket) for t in first] == [("t0000", 0), ("t0001", 0),
                                                         ("t0002", 0)]
    assert list(study.trials) == ["t0000", "t0001", "t0002"]
    study.restore(scored("t0001", 0, 0.4))
    later = draws.more(4, salt=1, first=3)
    assert [t.trial_id for t in later] == ["t0003", "t0004", "t0005", "t0006"]
    (_, h0, d0), (_, h1, d1) = sampler.told
    assert (h0, d0) == ([], [])
    assert h1 == [Observation(dict(first[1].hparams), 1.0, 0.4)]  # every result so far
    assert d1 == [dict(t.hparams) for t in first]
    assert len(set(values(first + later))) == 7
    assert set(draws.drawn) == {t.trial_id for t in first + later}
    # Seeded by the plan that draws them: the same plan draws the same configurations.
    again = Draws(context(SPACE), Sampler(), Study())
    assert values(again.more(3, salt=0, first=0)) == values(first)


def test_a_resumed_plan_s_draws_are_known_again_and_drawn_no_more():
    four = SearchSpace({"x": [0, 1, 2, 3], "batch_size": [10]})
    study = Study()
    draws = Draws(context(four), Sampler(), study)
    sampled = [{"trial_id": "t0000", "hparams": {"x": 2, "batch_size": 10}, "seed": 11},
               {"trial_id": "t0001", "hparams": {"x": 0, "batch_size": 10}, "seed": 12}]
    back = draws.replayed(sampled)
    assert [(t.trial_id, dict(t.hparams), t.seed, t.bracket) for t in back] == [
        ("t0000", {"x": 2, "batch_size": 10}, 11, 0), ("t0001", {"x": 0, "batch_size": 10}, 12, 0)]
    assert [t.features for t in back] == [four.features(d["hparams"]) for d in sampled]
    assert list(study.trials) == ["t0000", "t0001"] and list(draws.drawn) == ["t0000", "t0001"]
    draws.adopt(back)  # known already: its configurations are not counted twice
    assert len(draws.configs) == 2
    rest = draws.more(2, salt=1, first=2)
    assert sorted(t.hparams["x"] for t in rest) == [1, 3]  # the two not drawn before


def context(space: SearchSpace) -> SearchContext:
    """A search's context of ``space``, seed 0 (the draws read no strategy or capacity)."""
    return SearchContext(space, InOrder(), Capacity.members(2))
