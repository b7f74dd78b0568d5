"""A finished search as one frozen object: what the study makes (``runner.study.Study.result``),
``packexp.tune`` returns and ``packexp.load`` reads back; ``to_json`` is ``results.json``. The
plots, the summary, the tracker and ``SearchFinished`` take it."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packexp.events import PackRecord, TrialRecord
from packexp.records.results import best_kept, objective_of, records, search_metrics

# One row per trial and rung: these columns, then the trial's hyper-parameters.
TRIAL_COLUMNS = ("trial_id", "bracket", "status", "rung", "epochs", "steps", "val_accuracy",
                 "val_loss", "train_loss", "pack_id")
REGRESSION_COLUMNS = ("val_mse", "val_mae", "val_r2")  # after val_loss, in a regression's
RANKED_COLUMNS = ("params", "flops")  # before pack_id, where the objective ranks by them


@dataclass(frozen=True, eq=False)
class SearchResult:
    """A finished search.

    Attributes:
        run_dir: Its run directory (``results.json``, ``plan.json``, the plots, the journal).
        best: The best trial and rung by the search's objective: ``trial_id``,
            ``hparams``, ``val_accuracy``, ``epochs``, ``metric`` and ``value`` (the
            objective's metric there); None if no trial was scored.
        trials: A pandas DataFrame, one row per trial and rung it was scored at
            (``TRIAL_COLUMNS``, a regression's metrics and each of ``params`` and ``flops``
            the objective ranks by among them, then one column per hyper-parameter, named as
            in the search space; ``hparams.<name>`` for one named as a column before it).
        packs: A pandas DataFrame, one row per trained pack: its members, settings and time
            by phase (``build_s`` ... ``probe_s``), as ``results.json`` records them.
        mlflow_run_id: The search's MLflow run; None when it was not tracked.
        results: ``results.json``'s content (``to_json``).
    """

    run_dir: Path
    results: Mapping[str, Any] = field(repr=False)
    mlflow_run_id: str | None = None

    @classmethod
    def of(cls, run_dir: str | Path, results: Mapping[str, Any],
           mlflow_run_id: str | None = None) -> SearchResult:
        return cls(Path(run_dir), results, mlflow_run_id)

    def with_keys(self, **keys: Any) -> SearchResult:
        """This result with ``keys`` added to (or replacing those of) ``results.json``."""
        return SearchResult(self.run_dir, {**self.results, **keys}, self.mlflow_run_id)

    @property
    def stopped(self) -> str | None:
        """Why the search stopped early (its budget); None when it ran to its end."""
        return self.results.get("stopped")

    def metrics(self) -> dict[str, float | None]:
        """The parent run's summary metrics (``records.results.search_metrics``)."""
        return dict(self._metrics)

    @functools.cached_property
    def _metrics(self) -> dict[str, float | None]:
        return search_metrics(self.results, self.records)

    @functools.cached_property
    def records(self) -> tuple[list[TrialRecord], list[PackRecord]]:
        """The trials and packs read back as their records (``records.results.records``),
        read once: the metrics and the summary share them."""
        return records(self.results)

    def write_plots(self, out_dir: Path) -> list[Path]:
        """Draws the search's figures into ``out_dir`` (``records.plots.write_plots``); a
        figure that cannot be drawn is a warning. Returns the files written."""
        from packexp.records.plots import write_plots

        return write_plots(self.results, out_dir)

    def to_json(self) -> dict[str, Any]:
        """``results.json``: a copy, free to change."""
        return _copied(dict(self.results))

    @property
    def best(self) -> dict[str, Any] | None:
        return self.results.get("best")

    @functools.cached_property
    def trials(self) -> Any:
        return trial_table(self.results)

    @functools.cached_property
    def packs(self) -> Any:
        return pack_table(self.results)

    def __repr__(self) -> str:
        return f"SearchResult(run_dir={str(self.run_dir)!r}, best={self.best!r})"

    @property
    def best_val_accuracy(self) -> float | None:
        return self.best["val_accuracy"] if self.best else None

    @property
    def objective(self) -> dict[str, str]:
        """What the search tuned for: ``metric`` and ``mode`` (``max`` or ``min``)."""
        return objective_of(self.results).to_dict()

    @property
    def best_value(self) -> float | None:
        """The best trial's objective value (Optuna's ``Study.best_value``)."""
        return self.best.get("value", self.best["val_accuracy"]) if self.best else None

    @property
    def best_trials(self) -> list[dict[str, Any]]:
        """Under several objectives, the Pareto front: each trial not dominated in every
        goal by another, at its last scored rung (``trial_id``, ``hparams``, ``epochs`` and
        each goal's value); under one, ``[best]`` (Optuna's ``Study.best_trials``)."""
        if "pareto_front" in self.results:
            return list(self.results["pareto_front"])
        return [self.best] if self.best else []

    @property
    def best_params(self) -> dict[str, Any] | None:
        """The best trial's hyper-parameters (Optuna's ``Study.best_params``)."""
        return dict(self.best["hparams"]) if self.best else None

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        """The kept models (``keep_models``) by trial: ``file`` (relative to ``run_dir``),
        ``rung`` and ``epochs``, the result whose weights they hold."""
        return dict(self.results.get("models") or {})

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
        regression: the target in its units). See docs/models.md."""
        path = self.model_path(trial_id)
        if not path.name.endswith(".keras"):
            raise ValueError(f"{path}: only the weights of {trial_id}'s model were kept "
                             f"({self.models[trial_id].get('why')}); build the model and "
                             "load them with model.load_weights")
        import keras

        return keras.saving.load_model(path)

    def best_model(self) -> Any:
        """The best trial's kept model (``model``). Under several objectives ``best`` is the
        best on the first goal at any rung, whose weights the front may not keep: then the
        front's kept model best on the first goal (``records.results.best_kept``)."""
        if not self.best:
            raise ValueError(f"{self.run_dir}: the search scored no trial, so it has no best "
                             "model")
        entry = best_kept(self.results)
        if entry is None:
            raise KeyError(f"{self.run_dir}: the best trial's model was not kept "
                           f"(keep_models; kept: {', '.join(self.models) or 'none'})")
        return self.model(entry["trial_id"])

    def refit_model(self) -> Any:
        """The model ``packexp.refit`` (or ``refit=true``) trained on every row, loaded with
        ``keras.saving.load_model``; it takes and gives what ``best_model`` does."""
        refit = self.results.get("refit")
        if not refit:
            raise KeyError(f"{self.run_dir}: has no refit model; make one with "
                           "packexp.refit(run_dir) or refit=true")
        import keras

        return keras.saving.load_model(self.run_dir / refit["file"])

    def trials_dataframe(self) -> Any:
        """``trials``, by the name Optuna's ``Study.trials_dataframe()`` has."""
        return self.trials

    @property
    def wall_time_s(self) -> float:
        return float(self.results["wall_time_s"])

    def best_so_far(self) -> Any:
        """A DataFrame of the best validation accuracy against seconds since the search
        started, one row per pack that improved it (the step line of ``best_so_far.png``)."""
        import pandas as pd

        from packexp.records.plots import best_so_far_points

        return pd.DataFrame(best_so_far_points(self.results), columns=["seconds", "best"])

    def plot(self) -> Any:
        """The best-so-far figure (a matplotlib ``Figure``; a notebook shows it inline)."""
        from packexp.records.plots import best_so_far_figure

        return best_so_far_figure(self.results)


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


def trial_table(results: Mapping[str, Any]) -> Any:
    """``results.json``'s trials as one row per trial and rung (a trial never scored has
    one row with its rung empty)."""
    import pandas as pd

    columns, objective = TRIAL_COLUMNS, objective_of(results)
    if objective.regression:
        at = TRIAL_COLUMNS.index("val_loss") + 1
        columns = (*TRIAL_COLUMNS[:at], *REGRESSION_COLUMNS, *TRIAL_COLUMNS[at:])
    # Every goal of the objective, the parameter count of a Pareto search's too, before pack_id.
    ranked = tuple(n for n, _ in objective.goals if n in RANKED_COLUMNS)
    columns = (*columns[:-1], *ranked, columns[-1])
    rows = []
    for trial in results["trials"]:
        head = {"trial_id": trial["trial_id"], "bracket": trial["bracket"],
                "status": trial["status"]}
        record = TrialRecord.from_dict(trial)
        for rung in trial["rungs"] or [{}]:  # a population's member: the rung's values
            values = record.hparams_at(rung.get("epochs", 0.0))
            rows.append({**head, **{k: rung.get(k) for k in columns[3:]},
                         **(rung.get("metrics") or {}),  # the model's own, val_<name>
                         **{f"hparams.{k}" if k in columns else k: v
                            for k, v in values.items()}})
    return pd.DataFrame(rows, columns=None if rows else list(columns))


def pack_table(results: Mapping[str, Any]) -> Any:
    """``results.json``'s packs, one row each, with ``size``, their member count."""
    import pandas as pd

    table = pd.DataFrame(results["packs"])
    if len(table):
        table.insert(table.columns.get_loc("members") + 1, "size", table["members"].map(len))
    return table
