"""A finished search as one frozen, typed object; to_json and from_json are results.json.

What the study makes (``runner.study.Study.result``), ``packexp.tune`` returns and
``packexp.load`` reads back; ``to_json`` and ``from_json`` are the one place that spells out
``results.json``'s keys."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from packexp.objectives import ACCURACY, Objective
from packexp.records.best import Best, FrontPoint
from packexp.records.facts import SearchFacts, SearchTotals
from packexp.records.record import PackRecord, TrialRecord
from packexp.records.transfer import Transferred, rank_correlation, transferred

# One row per trial and rung: these columns, then the trial's hyper-parameters.
TRIAL_COLUMNS = ("trial_id", "bracket", "status", "rung", "epochs", "steps", "val_accuracy",
                 "val_loss", "train_loss", "pack_id")
REGRESSION_COLUMNS = ("val_mse", "val_mae", "val_r2")  # after val_loss, in a regression's
RANKED_COLUMNS = ("params", "flops")  # before pack_id, where the objective ranks by them


# results.json's keys that are neither facts nor totals: the typed record's own.
RECORD_KEYS = ("pareto_front", "objective", "wall_time_s", "trials", "packs", "best", "models",
               "transfer")


@dataclass(frozen=True, eq=False)
class SearchResult:
    """A finished search.

    Attributes:
        run_dir: Its run directory (``results.json``, ``plan.json``, the plots, the journal).
        trial_records: Every trial (``TrialRecord``: its rungs' results, lineage, status), in
            the order drawn.
        pack_records: Every trained pack (``PackRecord``), in the order published.
        best: The best trial and rung by the search's objective (``Best``: ``trial_id``,
            ``hparams``, ``val_accuracy``, ``epochs``, ``metric`` and ``value``, the
            objective's metric there, and every metric the rung recorded: ``val_loss``,
            ``train_loss``, a regression's ``val_mse``, ``val_mae`` and ``val_r2``; it reads
            as a dict too, ``best["hparams"]``, ``best["val_r2"]``); None if no trial was
            scored.
        front: Under several objectives, the Pareto front (``FrontPoint``); None under one.
        objective: What the search ranked by.
        wall_time_s: Its search's seconds, from the first pack.
        facts: Names, seed, schedule and timings (``SearchFacts``).
        totals: Its packs summed up (``SearchTotals``).
        kept: The kept models (``keep_models``) by trial: ``file`` (relative to
            ``run_dir``), ``rung`` and ``epochs``; ``why``, where the file holds the weights
            only (``.weights.h5``: Keras could not save or load the model whole).
        mlflow_run_id: The search's MLflow run; None when it was not tracked.
        rebuild: Builds a model kept as weights only again, from the run's config
            (``packexp.app.rebuild.kept_model``, which ``packexp.load`` and ``packexp.tune``
            give it); None: ``model`` says how to instead.
    """

    run_dir: Path
    trial_records: tuple[TrialRecord, ...]
    pack_records: tuple[PackRecord, ...]
    best: Best | None
    tuned_for: Objective = ACCURACY  # the typed ``objective``
    wall_time_s: float = 0.0
    facts: SearchFacts = field(default_factory=SearchFacts)
    totals: SearchTotals = field(default_factory=SearchTotals)
    front: tuple[FrontPoint, ...] | None = None
    kept: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    mlflow_run_id: str | None = None
    rebuild: Callable[[Path, str, Mapping[str, Any], Path], Any] | None = field(
        default=None, repr=False)

    @classmethod
    def from_json(cls, run_dir: str | Path, results: Mapping[str, Any],
                  mlflow_run_id: str | None = None) -> SearchResult:
        """``results.json``'s content read back, an older release's included (a key it lacks
        takes its default; one this release does not know is kept in ``facts.extra``)."""
        totals = {f.name for f in fields(SearchTotals)}
        front = results.get("pareto_front")
        return cls(
            Path(run_dir), tuple(TrialRecord.from_dict(t) for t in results["trials"]),
            tuple(PackRecord.from_dict(p) for p in results["packs"]),
            Best.from_dict(results["best"]) if results.get("best") else None,
            Objective.from_dict(results["objective"]) if results.get("objective")
            else ACCURACY,
            float(results.get("wall_time_s", 0.0)),
            SearchFacts.of({k: v for k, v in results.items()
                            if k not in totals and k not in RECORD_KEYS}),
            SearchTotals(**{k: v for k, v in results.items() if k in totals}),
            None if front is None else tuple(FrontPoint.from_dict(e) for e in front),
            {k: dict(v) for k, v in (results.get("models") or {}).items()}, mlflow_run_id)

    # ``of``: the name this constructor had before the result was typed.
    of = from_json

    def to_json(self) -> dict[str, Any]:
        """``results.json``: a new dict, free to change."""
        out = self.facts.head()
        if self.front is not None:
            out["pareto_front"] = [e.to_dict() for e in self.front]
        out.update({"objective": self.tuned_for.to_dict(), "wall_time_s": self.wall_time_s,
                    **self.totals.to_dict(),
                    "trials": [t.to_dict() for t in self.trial_records],
                    "packs": [p.to_dict() for p in self.pack_records],
                    "best": None if self.best is None else self.best.to_dict(),
                    "models": {k: dict(v) for k, v in self.kept.items()},
                    **({"transfer": {"trials": [p.to_dict() for p in self.transfer],
                                     "rank_correlation": rank_correlation(self.transfer)}}
                       if self.facts.surrogate else {}),
                    **self.facts.tail()})
        return _copied(out)

    @functools.cached_property
    def transfer(self) -> tuple[Transferred, ...]:
        """In a search over stand-ins (``surrogate``), each configuration trained again at
        full width beside its stand-in, with both scores (``records.transfer``)."""
        return transferred(self.trial_records, self.tuned_for)

    @functools.cached_property
    def results(self) -> Mapping[str, Any]:
        """``results.json``'s content (``to_json``), made once: read, do not change."""
        return self.to_json()

    def with_facts(self, **facts: Any) -> SearchResult:
        """This result with ``facts`` (``SearchFacts``' fields) set: what was made after it
        (``mlflow_model``, ``refit``)."""
        return replace(self, facts=replace(self.facts, **facts))

    @property
    def stopped(self) -> str | None:
        """Why the search stopped early (its budget); None when it ran to its end."""
        return self.facts.stopped

    @property
    def ended(self) -> str | None:
        """What ended the search: ``schedule`` (run to its end), ``budget.time_s`` or
        ``budget.trials`` (``stopped`` says how)."""
        return self.facts.ended

    def metrics(self) -> dict[str, float | None]:
        """The parent run's summary metrics (``records.results.search_metrics``)."""
        return dict(self._metrics)

    @functools.cached_property
    def _metrics(self) -> dict[str, float | None]:
        from packexp.records.results import search_metrics

        return search_metrics(self)

    def write_plots(self, out_dir: Path) -> list[Path]:
        """Draws the search's figures into ``out_dir`` (``records.plots.write_plots``); a
        figure that cannot be drawn is a warning. Returns the files written."""
        from packexp.records.plots import write_plots

        return write_plots(self, out_dir)

    @functools.cached_property
    def trials(self) -> Any:
        return trial_table(self)

    @functools.cached_property
    def packs(self) -> Any:
        return pack_table(self)

    def __repr__(self) -> str:
        best = None if self.best is None else self.best.to_dict()
        return f"SearchResult(run_dir={str(self.run_dir)!r}, best={best!r})"

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best.val_accuracy if self.best else None

    @property
    def objective(self) -> dict[str, str]:
        """What the search tuned for: ``metric`` and ``mode`` (``max`` or ``min``)."""
        return self.tuned_for.to_dict()

    @property
    def best_value(self) -> float | None:
        """The best trial's objective value (Optuna's ``Study.best_value``)."""
        return self.best.value if self.best else None

    @property
    def best_trials(self) -> list[Any]:
        """Under several objectives, the Pareto front: each trial not dominated in every
        goal by another, at its last scored rung (``FrontPoint``: ``trial_id``, ``hparams``,
        ``epochs`` and each goal's value); under one, ``[best]`` (Optuna's
        ``Study.best_trials``)."""
        if self.front is not None:
            return list(self.front)
        return [self.best] if self.best else []

    @property
    def best_params(self) -> dict[str, Any] | None:
        """The best trial's hyper-parameters (Optuna's ``Study.best_params``)."""
        return dict(self.best.hparams) if self.best else None

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        """The kept models (``keep_models``) by trial: ``file`` (relative to ``run_dir``),
        ``rung`` and ``epochs``, the result whose weights they hold."""
        return {k: dict(v) for k, v in self.kept.items()}

    def best_kept(self) -> Mapping[str, Any] | None:
        """The kept model that stands for the search's best: ``best``'s own when it was kept;
        under several objectives, where ``best`` (the best on the first goal at any rung) may
        be a rung whose weights the front does not keep, the front's kept model best on the
        first goal. None when no such model was kept."""
        if self.best is not None and self.best.model:
            return self.best
        front = [e for e in self.front or () if e.model]
        if not front:
            return None
        name, mode = self.tuned_for.goals[0]
        sign = 1 if mode == "max" else -1
        return max(front, key=lambda e: sign * e.values[name])

    def model_path(self, trial_id: str) -> Path:
        """The file of ``trial_id``'s kept model.

        Raises:
            KeyError: the search kept no model of that trial (the message lists those kept).
        """
        kept = self.models
        if trial_id not in kept:
            held = ", ".join(kept) or "none"
            raise KeyError(f"{trial_id}: the search kept no model of it (kept: {held}; "
                           "keep_models chooses which are kept)")
        return self.run_dir / kept[trial_id]["file"]

    def model(self, trial_id: str) -> Any:
        """``trial_id``'s kept model, loaded with ``keras.saving.load_model``: it takes the
        rows as they were given to the search and returns class probabilities (a
        regression: the target in its units). See docs/models.md.

        Where only its weights were kept (Keras could not save or load it whole), the same
        model built again from the run's builder and those weights (``rebuild``).

        Raises:
            ValueError: Only its weights were kept and it cannot be built here; the message
                says how to build it.
        """
        path = self.model_path(trial_id)
        if not path.name.endswith(".keras"):
            kept = self.kept[trial_id]
            [record] = [t for t in self.trial_records if t.trial_id == trial_id]
            return self._from_weights(trial_id, record.hparams_at(kept["epochs"]), path,
                                      kept.get("why"))
        import keras

        return keras.saving.load_model(path)

    def _from_weights(self, trial_id: str, hparams: Mapping[str, Any], path: Path,
                      why: str | None) -> Any:
        """The model whose weights alone ``path`` keeps, built again (``rebuild``)."""
        if self.rebuild is None:
            raise ValueError(f"{path}: only the weights of {trial_id}'s model were kept "
                             f"({why}); packexp.load(run_dir) builds it again where its "
                             "builder imports, or build it with your builder and its hparams "
                             f"{dict(hparams)} and call model.load_weights(path) "
                             "(docs/models.md, \"What is kept\")")
        return self.rebuild(self.run_dir, trial_id, hparams, path)

    def best_model(self) -> Any:
        """The best trial's kept model (``model``). Under several objectives ``best`` is the
        best on the first goal at any rung, whose weights the front may not keep: then the
        front's kept model best on the first goal (``best_kept``)."""
        if not self.best:
            raise ValueError(f"{self.run_dir}: the search scored no trial, so it has no best "
                             "model")
        entry = self.best_kept()
        if entry is None:
            raise KeyError(f"{self.run_dir}: the best trial's model was not kept "
                           f"(keep_models; kept: {', '.join(self.models) or 'none'})")
        return self.model(entry["trial_id"])

    def refit_model(self) -> Any:
        """The model ``packexp.refit`` (or ``refit=true``) trained on every row, loaded with
        ``keras.saving.load_model`` (built again where only its weights were kept, as
        ``model``); it takes and gives what ``best_model`` does."""
        refit = self.facts.refit
        if not refit:
            raise KeyError(f"{self.run_dir}: has no refit model; make one with "
                           "packexp.refit(run_dir) or refit=true")
        path = self.run_dir / refit["file"]
        if not path.name.endswith(".keras"):
            return self._from_weights(refit["trial_id"], refit["hparams"], path,
                                      refit.get("why"))
        import keras

        return keras.saving.load_model(path)

    def trials_dataframe(self) -> Any:
        """``trials``, by the name Optuna's ``Study.trials_dataframe()`` has."""
        return self.trials

    def best_so_far(self) -> Any:
        """A DataFrame of the best validation accuracy against seconds since the search
        started, one row per pack that improved it (the step line of ``best_so_far.png``)."""
        import pandas as pd

        from packexp.records.plots import best_so_far_points

        return pd.DataFrame(best_so_far_points(self), columns=["seconds", "best"])

    def plot(self) -> Any:
        """The best-so-far figure (a matplotlib ``Figure``; a notebook shows it inline)."""
        from packexp.records.plots import best_so_far_figure

        return best_so_far_figure(self)


def _copied(value: Any) -> Any:
    """``copy.deepcopy`` of JSON's values, at twice its speed: dicts and lists copied
    level by level, strings and numbers shared (they cannot change), anything else deep
    copied. Values held twice are copied twice (deepcopy keeps them one): JSON cannot say
    so either."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def trial_table(result: SearchResult) -> Any:
    """The search's trials as one row per trial and rung (a trial never scored has one row
    with its rung empty)."""
    import pandas as pd

    columns, objective = TRIAL_COLUMNS, result.tuned_for
    if objective.regression:
        at = TRIAL_COLUMNS.index("val_loss") + 1
        columns = (*TRIAL_COLUMNS[:at], *REGRESSION_COLUMNS, *TRIAL_COLUMNS[at:])
    # Every goal of the objective, the parameter count of a Pareto search's too, before pack_id.
    ranked = tuple(n for n, _ in objective.goals if n in RANKED_COLUMNS)
    columns = (*columns[:-1], *ranked, columns[-1])
    rows = []
    for trial in result.trial_records:
        head = {"trial_id": trial.trial_id, "bracket": trial.bracket,
                "status": trial.status.value}
        for rung in trial.rungs or [None]:  # a population's member: the rung's values
            values = trial.hparams_at(0.0 if rung is None else rung.epochs)
            rows.append({**head, **{k: None if rung is None else getattr(rung, k)
                                    for k in columns[3:]},
                         **((rung and rung.metrics) or {}),  # the model's own, val_<name>
                         **{f"hparams.{k}" if k in columns else k: v
                            for k, v in values.items()}})
    return pd.DataFrame(rows, columns=None if rows else list(columns))


def pack_table(result: SearchResult) -> Any:
    """The search's packs, one row each as ``results.json`` records them, with ``size``,
    their member count."""
    import pandas as pd

    table = pd.DataFrame([p.to_dict() for p in result.pack_records])
    if len(table):
        table.insert(table.columns.get_loc("members") + 1, "size", table["members"].map(len))
    return table
