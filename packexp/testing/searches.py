"""Whole searches in this process, through the config (``search``, ``search_command``, and
``search_on_fake`` on a ``FakeTrainer``), the models a search kept (``kept_models``), and
what a run's results say apart from timings and places (``outcome``, ``results_per_trial_and_
rung``), to compare runs that trained the same plan elsewhere."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from packexp.testing.config import compose_config


def search(run_dir: Path, *overrides: str, strategy: str | None = "knn") -> dict:
    """Runs the search ``overrides`` compose in this process, into ``run_dir``, and returns its
    ``results.json``: a test that needs a search's results, not the command, so pays no
    TensorFlow import in a child. ``run(cfg)`` is what ``python -m packexp`` runs, less what
    Hydra adds around it: the ``.hydra`` files and log, the run directory's checks
    (``RunDirCheck``), the command's overrides in the journal and Hydra's choices in MLflow.
    As ``compose_config``, it runs ``strategy`` (knn) unless the overrides name one or
    ``strategy=None`` (the default, cost), and keeps memory probes in the run directory only.
    The summary goes to stdout, for ``capsys``; the log to ``caplog``."""
    from packexp.app.main import run

    run(compose_config(list(overrides), strategy=strategy), run_dir=run_dir)
    return json.loads((Path(run_dir) / "results.json").read_text())


def search_on_fake(run_dir: Path, *overrides: str, strategy: str | None = "knn",
                   trainer=None) -> dict:
    """``search``, but on ``trainer`` (a ``packexp.testing.FakeTrainer`` that fails no trial
    unless given): the same config, runner, journal, tracker, ``results.json`` and plots in
    milliseconds, for a test whose check is orchestration, not trained numbers. The fake
    refuses ``strategy=cost`` and ``executor=ray``."""
    from packexp.app.main import run
    from packexp.testing.fake_trainer import FakeTrainer

    run(compose_config(list(overrides), strategy=strategy), run_dir=run_dir,
        trainer=FakeTrainer(failing="") if trainer is None else trainer)
    return json.loads((Path(run_dir) / "results.json").read_text())


def search_command(args: list[str]) -> dict:
    """``search`` of a command's arguments (a printed resume line's, say): its
    ``hydra.run.dir=`` is the run directory, the rest are the overrides, and the strategy is
    the one they name or the default, as the command would run."""
    [run_dir] = [a.removeprefix("hydra.run.dir=") for a in args if a.startswith("hydra.run.dir=")]
    return search(Path(run_dir), *[a for a in args if not a.startswith("hydra.run.dir=")],
                  strategy=None)


def kept_models(run_dir: Path) -> dict[str, tuple[str, str]]:
    """The models a search in ``run_dir`` kept (``keep_models``): each trial's file and a
    SHA-256 of its weights, for comparing two runs' kept models exactly."""
    import hashlib

    import keras
    import numpy as np

    results = json.loads((Path(run_dir) / "results.json").read_text())
    out = {}
    for trial_id, kept in (results.get("models") or {}).items():
        model = keras.saving.load_model(Path(run_dir) / kept["file"])
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes()
                                         for w in model.get_weights())).hexdigest()
        out[trial_id] = (kept["file"], digest)
    return out


def outcome(run_dir: Path) -> dict:
    """What ``results.json`` says apart from timings and where packs trained (and which packs
    reused a worker's models): each trial's values, status, packs and every rung's epochs,
    steps and scores; each pack's members, steps, fusion and splits; the best."""
    results = json.loads((run_dir / "results.json").read_text())
    return {"trials": {t["trial_id"]: (t["hparams"], t["status"], t["packs"],
                                       [(r["rung"], r["epochs"], r["steps"], r["val_accuracy"],
                                         r["val_loss"], r["train_loss"]) for r in t["rungs"]])
                       for t in results["trials"]},
            "packs": [(p["pack_id"], p["members"], p["steps"], p["fused"], p["splits"])
                      for p in results["packs"]],
            "best": results["best"]}


def results_per_trial_and_rung(run_dir: Path) -> Counter:
    """How many results the journal holds for each (trial, rung): 1 each, unless a pack was
    published twice."""
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return Counter((r["trial_id"], r["rung"]) for r in map(json.loads, lines)
                   if r["event"] == "result")
