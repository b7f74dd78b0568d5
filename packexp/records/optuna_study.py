"""A search as an Optuna study (``packexp.to_optuna``), so ``optuna.visualization`` and
optuna-dashboard read it unchanged."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from packexp.records.results import objective_of
from packexp.records.search_result import load

#: Each packexp status as an Optuna trial state's name: cut by halving is pruned; a trial a
#: stopped search left running stays running.
STATES = {"finished": "COMPLETE", "killed": "PRUNED", "failed": "FAIL", "running": "RUNNING"}


def to_optuna(run_dir: str | Path, storage: Any = None, study_name: str | None = None) -> Any:
    """Writes the finished or stopped search in ``run_dir`` as an Optuna study and returns it.

    Each trial holds its configuration as ``params`` (over the search space's distributions),
    each rung's objective value as an intermediate value at its epochs (rounded), and its
    state: ``COMPLETE`` (it finished its bracket; its value is its last rung's), ``PRUNED``
    (cut by halving), ``FAIL`` (diverged) or ``RUNNING`` (a stopped search's). The study's
    direction is the objective's. ``user_attrs`` keep packexp's ``trial_id`` and bracket.

    Args:
        run_dir: A run directory holding ``results.json`` (``packexp.load`` reads it too).
        storage: Where the study is written: an Optuna storage or its URL
            (``"sqlite:///search.db"``); None keeps it in memory.
        study_name: The study's name; by default the run directory's name.

    Raises:
        FileNotFoundError, ValueError: As ``packexp.load``.
        optuna.exceptions.DuplicatedStudyError: ``storage`` holds a study of that name.
    """
    import optuna
    from optuna.trial import TrialState, create_trial

    from packexp.samplers.tpe import distribution

    result = load(run_dir)
    objective = objective_of(result.results)
    space = _space(Path(run_dir))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage, study_name=study_name or Path(run_dir).name,
                                direction="maximize" if objective.mode == "max" else "minimize")
    trials = []
    for trial in result.results["trials"]:
        rungs = trial["rungs"]
        values = {round(r["epochs"]): objective.value(r) for r in rungs}
        state = STATES[trial["status"]]
        last = objective.value(rungs[-1]) if rungs else None
        if state == "COMPLETE" and last is None:
            state = "FAIL"
        params = {k: v for k, v in trial["hparams"].items() if k in space.dims}
        trials.append(create_trial(
            params=params, distributions={k: distribution(space.dims[k]) for k in params},
            value=last if state == "COMPLETE" else None,
            intermediate_values={e: v for e, v in values.items() if v is not None},
            state=TrialState[state],
            user_attrs={"trial_id": trial["trial_id"], "bracket": trial["bracket"]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([objective.metric])
        study.add_trials(trials)
    return study


def _space(run_dir: Path) -> Any:
    """The search space the run searched, from the config Hydra kept with it."""
    import hydra
    from omegaconf import OmegaConf

    kept = run_dir / ".hydra" / "config.yaml"
    if not kept.is_file():
        raise FileNotFoundError(f"{run_dir}: no .hydra/config.yaml, the config the search "
                                "ran with; its search space is unknown")
    return hydra.utils.instantiate(OmegaConf.load(kept).search_space)
