"""A search as an Optuna study (``packexp.to_optuna``), so ``optuna.visualization`` and
optuna-dashboard read it unchanged."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

from packexp.objectives import Objective
from packexp.records.record import TrialRecord
from packexp.runner.study import load

#: Each packexp status as an Optuna trial state's name: cut by halving is pruned; a trial a
#: stopped search left running stays running.
STATES = {"finished": "COMPLETE", "killed": "PRUNED", "failed": "FAIL", "running": "RUNNING"}

#: The study's user attribute that marks it as this export, so a second call finds it.
DIGEST = "packexp_digest"


def to_optuna(run_dir: str | Path, storage: Any = None, study_name: str | None = None) -> Any:
    """Writes the finished or stopped search in ``run_dir`` as an Optuna study and returns it.

    Each trial holds its configuration as ``params`` (over the search space's distributions),
    each rung's objective value as an intermediate value at its epochs (rounded), and its
    state: ``COMPLETE`` (it finished its bracket; its value is its last rung's), ``PRUNED``
    (cut by halving), ``FAIL`` (diverged) or ``RUNNING`` (a stopped search's). The study's
    direction is the objective's. ``user_attrs`` keep packexp's ``trial_id``, bracket and
    ``status``.

    Under several objectives the study has every goal's direction and metric name, and each
    trial with a scored rung is ``COMPLETE`` with every goal's value at its last scored rung,
    as ``results.json``'s ``pareto_front`` counts it, so ``study.best_trials`` is that front;
    its intermediate values are the first goal's.

    A second call with the same ``storage`` and ``study_name`` returns the study the first
    wrote, unchanged: nothing is written twice.

    Args:
        run_dir: A run directory holding ``results.json`` (``packexp.load`` reads it too).
        storage: Where the study is written: an Optuna storage or its URL
            (``"sqlite:///search.db"``); None keeps it in memory.
        study_name: The study's name; by default the run directory's name.

    Returns:
        The ``optuna.Study``.

    Raises:
        FileNotFoundError, ValueError: As ``packexp.load``.
        ValueError: ``storage`` holds a study of that name that is not this export (another
            run's, or this run's before it was resumed): delete it or choose another name.
    """
    import optuna
    from optuna.trial import TrialState, create_trial

    from packexp.samplers.tpe import distribution

    result = load(run_dir)
    objective = result.tuned_for
    space = _space(Path(run_dir))
    rows = [_row(trial, objective, space.dims) for trial in result.trial_records]
    directions = ["maximize" if mode == "max" else "minimize" for _, mode in objective.goals]
    names = [name for name, _ in objective.goals]
    digest = hashlib.sha256(json.dumps([directions, names, rows], sort_keys=True,
                                       default=str).encode()).hexdigest()
    name = study_name or Path(run_dir).name
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage, study_name=name, directions=directions,
                                load_if_exists=True)
    if study.user_attrs.get(DIGEST) == digest:
        return study
    if study.trials or study.user_attrs or [d.name.lower() for d in study.directions] \
            != directions:
        raise ValueError(f"to_optuna: study {name!r} in {storage!r} holds other trials or "
                         f"directions than {run_dir}'s; delete it (optuna.delete_study) or "
                         "pass another study_name")
    trials = [create_trial(
        params=r["params"], distributions={k: distribution(space.dims[k]) for k in r["params"]},
        values=r["values"], intermediate_values=r["intermediate"],
        state=TrialState[r["state"]], user_attrs=r["attrs"]) for r in rows]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(names)
        study.add_trials(trials)
    study.set_user_attr(DIGEST, digest)  # last, so a half-written study is never taken as done
    return study


def _row(trial: TrialRecord, objective: Objective, dims: dict[str, Any]) -> dict[str, Any]:
    """One trial as the study records it: params, state, values, intermediate values and
    user attributes."""
    rungs = trial.rungs
    state = STATES[trial.status]
    if objective.several:
        scored = [s for r in rungs if (s := objective.scores(r)) is not None]
        if scored:  # the front's convention: every trial at its last scored rung
            state = "COMPLETE"
        values = [s if mode == "max" else -s
                  for s, (_, mode) in zip(scored[-1], objective.goals, strict=True)] \
            if scored else None
    else:
        values = [v] if rungs and (v := objective.value(rungs[-1])) is not None else None
    if state == "COMPLETE" and values is None:
        state = "FAIL"
    intermediate = {round(r.epochs): objective.value(r) for r in rungs}
    return {"params": {k: v for k, v in trial.hparams.items() if k in dims},
            "state": state, "values": values if state == "COMPLETE" else None,
            "intermediate": {e: v for e, v in intermediate.items() if v is not None},
            "attrs": {"trial_id": trial.trial_id, "bracket": trial.bracket,
                      "status": trial.status.value}}


def _space(run_dir: Path) -> Any:
    """The search space the run searched, from the config Hydra kept with it."""
    import hydra
    from omegaconf import OmegaConf

    from packexp.config import space_node

    kept = run_dir / ".hydra" / "config.yaml"
    if not kept.is_file():
        raise FileNotFoundError(f"{run_dir}: no .hydra/config.yaml, the config the search "
                                "ran with; its search space is unknown")
    return hydra.utils.instantiate(space_node(OmegaConf.load(kept).search_space))
