"""Best so far against wall time: packexp's searches ("arms") over seeds, and Optuna's own.

Usage: python scripts/compare_search.py [--seeds 0,1,2,3,4] [--arms random,tpe]
                                        [--arm NAME='override ...'] [--no-optuna]
                                        [--dataset mnist1d] [--R 27] [--eta 3] [--out DIR]
                                        [overrides ...]

Each arm is ``python -m packexp`` with the arm's Hydra overrides on top of the common ones
(``dataset``, ``scheduler.R``, ``scheduler.eta``, ``seed`` and the positional overrides, such
as ``strategy=knn``), in a child process of its own. Seeds are the outer loop and arms the
inner one, so machine noise spreads over the arms. The reference arm, ``optuna``, is Optuna's
TPESampler and HyperbandPruner training the same Keras model on the same data and space one
trial at a time, until it has trained as many epochs as packexp's ``random`` arm (or, without
it, Hyperband's total). Writes runs.json, summary.json, summary.md and best_so_far.png in
``--out`` (default outputs/compare_search/<timestamp>).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packexp.files import write_json

ROOT = Path(__file__).resolve().parents[1]

KNOWN_ARMS: dict[str, list[str]] = {
    "random": ["sampler=random"],
    "tpe": ["sampler=tpe"],
    "asha": ["scheduler=asha"],
    "asha-tpe": ["scheduler=asha", "sampler=tpe"],
}
OPTUNA = "optuna"
# The arm whose mean best is the target of "time to random's best", and whose epochs the
# Optuna arm is given.
BASELINE = "random"
PLOT_POINTS = 500


class UsageError(Exception):
    """Bad input; reported as one line with exit code 2."""


class ChildError(Exception):
    """A child process failed; reported with its stderr's tail, exit code 1."""


@dataclass
class Run:
    """One search of one arm at one seed, as runs.json keeps it.

    Attributes:
        process_s: The child's whole-process wall time, measured here.
        wall_time_s: The search's own time, as it reports it.
        anytime: ``{"elapsed_s", "epochs", "best"}`` points in order; ``best`` may be None.
        budget_epochs: The Optuna arm's epoch budget; None for packexp's arms.
    """

    arm: str
    seed: int
    process_s: float
    wall_time_s: float
    best: dict[str, Any] | None
    epochs_spent: float
    anytime: list[dict[str, Any]]
    budget_epochs: float | None = None
    idle_fraction: float | None = None  # packexp's workers' idle share (results.json workers)

    @property
    def best_accuracy(self) -> float | None:
        return self.best["val_accuracy"] if self.best else None

    def time_to(self, target: float) -> float | None:
        """Seconds into the search at which its best first reached ``target``; None if never."""
        return next((p["elapsed_s"] for p in self.anytime
                     if p["best"] is not None and p["best"] >= target), None)


def compose(overrides: Sequence[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def run_child(arm: str, seed: int, cmd: list[str]) -> float:
    """Runs ``cmd`` from the repository root; returns its whole-process wall time."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        raise ChildError(f"arm {arm}, seed {seed} failed (exit {done.returncode}): "
                         f"{shlex.join(cmd)}\n{done.stderr.strip()[-2000:]}")
    return process_s


def run_packexp(arm: str, seed: int, overrides: list[str], run_dir: Path) -> Run:
    cmd = [sys.executable, "-m", "packexp", "tracking=none", f"hydra.run.dir={run_dir}",
           *overrides]
    process_s = run_child(arm, seed, cmd)
    results = json.loads((run_dir / "results.json").read_text())
    return Run(arm, seed, process_s, results["wall_time_s"], results["best"],
               results["epochs_spent"], results["anytime"],
               idle_fraction=(results.get("workers") or {}).get("idle_fraction"))


def run_optuna(seed: int, overrides: list[str], budget: float, out: Path) -> Run:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--optuna-worker", str(out),
           "--budget-epochs", repr(budget), *overrides]
    process_s = run_child(OPTUNA, seed, cmd)
    results = json.loads(out.read_text())
    return Run(OPTUNA, seed, process_s, results["wall_time_s"], results["best"],
               results["epochs_spent"], results["anytime"], budget)


def hyperband_epochs(R: int, eta: int) -> float:
    """Epochs Hyperband trains in all with continuation on promotion."""
    from packexp.schedulers import Hyperband

    hyperband = Hyperband(R, eta)
    return sum(hyperband.epochs(b, True) for b in hyperband.brackets())


def check_optuna_space(overrides: list[str]) -> None:
    """Refuses a search the Optuna arm cannot train as packexp does, before anything runs."""
    from hydra.errors import HydraException

    from packexp.config import PREPROCESS_KEYS, instantiate
    from packexp.errors import ConfigError

    try:
        cfg = compose(overrides)
        space = instantiate(cfg.search_space, "search_space")
    except (HydraException, ConfigError) as e:
        message = str(e).split("\nConfig search path")[0]  # Hydra's lists its search path
        raise UsageError(" ".join(message.split())) from None
    for name in space.dims:
        if name in (*PREPROCESS_KEYS, "lr_schedule"):
            raise UsageError(f"search_space.params.{name}: the optuna arm trains in plain Keras "
                             "and has no equivalent; use --no-optuna")
    preprocess = cfg.preprocess
    if (preprocess.mean is not None or preprocess.std is not None or preprocess.crop_padding
            or preprocess.flip):
        raise UsageError("preprocess: the optuna arm has no on-device preprocessing; use "
                         "--no-optuna")


def optuna_worker(out: Path, overrides: list[str], budget: float) -> None:
    """Optuna's TPESampler and HyperbandPruner on packexp's data, model and space: one trial
    at a time in plain Keras, an epoch per ``fit``, until ``budget`` epochs are trained."""
    import keras
    import numpy as np
    import optuna

    from packexp.config import fit_dataset_to_model
    from packexp.config.components import Components
    from packexp.packing.optimizers import optimizer_args
    from packexp.space import derive_seed
    from packexp.space.dimensions import Choice, FloatRange, IntRange
    from packexp.space.options import OPTIMIZERS

    cfg = compose(overrides)
    fit_dataset_to_model(cfg)
    parts = Components.build(cfg, probe=False)
    data, seed = parts.dataset, int(cfg.seed)
    R, eta = parts.scheduler.R, parts.scheduler.eta

    def features(x: np.ndarray) -> np.ndarray:  # packexp's on-device scaling, done up front
        return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)

    x_train, x_val = features(data.x_train), features(data.x_val)

    def suggest(trial: optuna.Trial, dim: Any) -> Any:
        if isinstance(dim, IntRange):
            return trial.suggest_int(dim.name, dim.low, dim.high, step=dim.step)
        if isinstance(dim, FloatRange):
            return trial.suggest_float(dim.name, dim.low, dim.high, log=dim.log)
        if isinstance(dim, Choice):
            return trial.suggest_categorical(dim.name, list(dim.values))
        raise TypeError(f"{dim.where}: the optuna arm has no kind={dim.kind}")

    def plain_model(hparams: dict) -> keras.Model:
        """As compare_kerastuner.py builds it (``keras_model``)."""
        from compare_kerastuner import keras_model

        return keras_model(cfg, parts.build_model, data, hparams)

    def keras_optimizer(hparams: dict) -> keras.optimizers.Optimizer:
        """Keras's own class for the name, with packexp's defaults and the trial's options."""
        name = hparams["optimizer"]
        spec = OPTIMIZERS[name]
        options = {**spec.options,
                   **{k: v for k, v in hparams.items() if k in optimizer_args(name)}}
        return getattr(keras.optimizers, spec.keras_class)(
            learning_rate=hparams["learning_rate"], **options)

    anytime: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    spent = 0

    def objective(trial: optuna.Trial) -> float:
        nonlocal best, spent
        hparams = {name: suggest(trial, dim) for name, dim in parts.space.dims.items()}
        keras.backend.clear_session()
        keras.utils.set_random_seed(derive_seed(seed, trial.number))
        model = plain_model(hparams)
        model.compile(optimizer=keras_optimizer(hparams),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        for epoch in range(1, R + 1):
            history = model.fit(x_train, data.y_train, batch_size=hparams["batch_size"],
                                epochs=1, validation_data=(x_val, data.y_val), verbose=0)
            accuracy = float(history.history["val_accuracy"][-1])
            spent += 1
            if best is None or accuracy > best["val_accuracy"]:
                best = {"val_accuracy": accuracy, "hparams": hparams, "trial": trial.number,
                        "epochs": epoch}
            elapsed = round(time.perf_counter() - start, 4)
            anytime.append({"trial": trial.number, "elapsed_s": elapsed,
                            "epochs": spent, "best": best["val_accuracy"]})
            trial.report(accuracy, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return accuracy

    def stop_at_budget(study: optuna.Study, _: optuna.trial.FrozenTrial) -> None:
        if spent >= budget:
            study.stop()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=R,
                                              reduction_factor=eta))
    start = time.perf_counter()
    study.optimize(objective, callbacks=[stop_at_budget])
    write_json(out, {"wall_time_s": round(time.perf_counter() - start, 3), "best": best,
                     "epochs_spent": spent, "budget_epochs": budget,
                     "trials": len(study.trials), "anytime": anytime})


def summarize(runs: Sequence[Run], arms: Sequence[str]) -> dict[str, Any]:
    """Per arm: seeds, best (mean, std, min, max), mean times and epochs; the time to reach
    ``random``'s mean best as a share of its mean wall time; the gaps to Optuna's arm."""
    def mean(values: Sequence[float]) -> float | None:
        return statistics.fmean(values) if values else None

    by_arm = {arm: [r for r in runs if r.arm == arm] for arm in arms}
    bests = {arm: [r.best_accuracy for r in mine if r.best_accuracy is not None]
             for arm, mine in by_arm.items()}
    target = mean(bests.get(BASELINE, []))
    baseline_wall = mean([r.wall_time_s for r in by_arm.get(BASELINE, [])])
    rows: dict[str, dict[str, Any]] = {}
    for arm, mine in by_arm.items():
        scores = bests[arm]
        row: dict[str, Any] = {
            "seeds": len(mine), "best_mean": mean(scores),
            "best_std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "best_min": min(scores, default=None), "best_max": max(scores, default=None),
            "wall_time_s_mean": mean([r.wall_time_s for r in mine]),
            "process_s_mean": mean([r.process_s for r in mine]),
            "epochs_spent_mean": mean([r.epochs_spent for r in mine]),
            "idle_fraction_mean": mean([r.idle_fraction for r in mine
                                        if r.idle_fraction is not None])}
        if arm == OPTUNA:
            row["budget_epochs_mean"] = mean([r.budget_epochs for r in mine])
        if target is not None and baseline_wall:
            times = [r.time_to(target) for r in mine]
            reached = sum(t is not None for t in times)
            # A seed that never reaches the target counts as its whole search.
            to_target = mean([r.wall_time_s if t is None else t
                              for r, t in zip(mine, times, strict=True)])
            row |= {"to_random_best_s_mean": to_target, "reached_random_best": reached,
                    "to_random_best_fraction": to_target / baseline_wall}
        rows[arm] = row
    reference = rows.get(OPTUNA)
    if reference and reference["best_mean"] is not None:
        for row in rows.values():
            row["best_minus_optuna"] = (None if row["best_mean"] is None
                                        else row["best_mean"] - reference["best_mean"])
            row["process_vs_optuna"] = row["process_s_mean"] / reference["process_s_mean"]
    return {"random_best_target": target, "arms": rows}


def markdown(summary: dict[str, Any]) -> str:
    """The summary as a markdown table, one row per arm."""
    def number(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = ["arm", "seeds", "best (mean ± std)", "min best", "max best", "search s",
              "process s", "epochs", "workers idle", "to random's best (share of its time)",
              "best - optuna", "process / optuna"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, row in summary["arms"].items():
        reached = ("-" if "reached_random_best" not in row else
                   f"{row['to_random_best_fraction']:.2f} "
                   f"({row['reached_random_best']}/{row['seeds']} reached)")
        cells = [arm, str(row["seeds"]),
                 f"{number(row['best_mean'], 4)} ± {row['best_std']:.4f}",
                 number(row["best_min"], 4), number(row["best_max"], 4),
                 number(row["wall_time_s_mean"], 1), number(row["process_s_mean"], 1),
                 number(row["epochs_spent_mean"], 1), number(row["idle_fraction_mean"], 3),
                 reached,
                 number(row.get("best_minus_optuna"), 4),
                 number(row.get("process_vs_optuna"), 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def step_curve(anytime: Sequence[dict[str, Any]], key: str, grid: Any) -> Any:
    """A run's best so far at each of ``grid``'s values of ``key`` (NaN before its first)."""
    import numpy as np

    xs = np.array([p[key] for p in anytime], dtype=float)
    ys = np.array([np.nan if p["best"] is None else p["best"] for p in anytime], dtype=float)
    i = np.searchsorted(xs, grid, side="right") - 1
    return np.where(i >= 0, ys[np.maximum(i, 0)] if len(ys) else np.nan, np.nan)


def plot(runs: Sequence[Run], arms: Sequence[str], path: Path, title: str) -> None:
    """Best so far against search seconds and epochs spent: each arm's mean over seeds (where
    every seed has a result) and its min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, key, label in zip(axes, ("elapsed_s", "epochs"),
                              ("search wall time (s)", "epochs spent (summed over trials)"),
                              strict=True):
        ends = {arm: max((r.anytime[-1][key] for r in runs if r.arm == arm and r.anytime),
                         default=0.0) for arm in arms}
        grid = np.linspace(0.0, max(ends.values(), default=0.0), PLOT_POINTS)
        for arm in arms:
            mine = [r for r in runs if r.arm == arm]
            if not mine:
                continue
            curves = np.array([step_curve(r.anytime, key, grid) for r in mine])
            keep = grid <= ends[arm]
            line, = ax.plot(grid[keep], curves.mean(axis=0)[keep],
                            label=f"{arm} ({len(mine)} seeds)")
            ax.fill_between(grid[keep], np.fmin.reduce(curves, axis=0)[keep],
                            np.fmax.reduce(curves, axis=0)[keep], color=line.get_color(),
                            alpha=0.2, linewidth=0)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best validation accuracy so far")
    axes[0].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_arms(names: str, defined: Sequence[str]) -> dict[str, list[str]]:
    """The arms to run, in order: ``--arms`` names, then those ``--arm`` defines."""
    arms: dict[str, list[str]] = {}
    for spec in defined:
        name, sep, overrides = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--arm {spec!r}: must be NAME='override override ...'")
        if name == OPTUNA:
            raise UsageError(f"--arm {name}: the name of the reference arm (--no-optuna "
                             "turns it off)")
        arms[name] = shlex.split(overrides)
    chosen = {}
    for name in filter(None, names.split(",")):
        if name not in arms and name not in KNOWN_ARMS:
            raise UsageError(f"--arms: unknown arm {name!r}; known arms are "
                             f"{', '.join(KNOWN_ARMS)} (or define one: --arm NAME='overrides')")
        chosen[name] = arms.get(name, KNOWN_ARMS.get(name))
    return chosen | arms


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise UsageError(f"--seeds {text!r}: must be integers separated by commas") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {text!r}: must be distinct integers separated by commas")
    return seeds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="compare_search", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    p.add_argument("--arms", default="random,tpe",
                   help=f"comma-separated arms; known: {', '.join(KNOWN_ARMS)}")
    p.add_argument("--arm", action="append", default=[], metavar="NAME='OVERRIDES'",
                   help="defines (and runs) an arm: its Hydra overrides, space-separated")
    p.add_argument("--optuna", action=argparse.BooleanOptionalAction, default=True,
                   help="run the reference arm: Optuna's TPESampler + HyperbandPruner")
    p.add_argument("--dataset", default="mnist1d")
    p.add_argument("--R", type=int, default=27, help="most epochs per configuration")
    p.add_argument("--eta", type=int, default=3, help="Hyperband's reduction factor")
    p.add_argument("--out", type=Path, help="default outputs/compare_search/<timestamp>")
    p.add_argument("--optuna-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--budget-epochs", type=float, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", default=[],
                   help="Hydra overrides for every arm (strategy=knn, model=..., ...)")
    return p


def compare(args: argparse.Namespace) -> None:
    arms = parse_arms(args.arms, args.arm)
    seeds = parse_seeds(args.seeds)
    if not arms and not args.optuna:
        raise UsageError("nothing to run: no arms and --no-optuna")
    out = (args.out or ROOT / "outputs" / "compare_search" / time.strftime("%Y-%m-%d_%H-%M-%S"))
    out = out.resolve()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out}: is not empty")
    common = [f"dataset={args.dataset}", f"scheduler.R={args.R}", f"scheduler.eta={args.eta}",
              *args.overrides]
    if args.optuna:
        check_optuna_space([*common, f"seed={seeds[0]}"])
    names = [*arms, OPTUNA] if args.optuna else list(arms)
    runs: list[Run] = []
    for seed in seeds:
        for arm, overrides in arms.items():
            run = run_packexp(arm, seed, [*common, f"seed={seed}", *overrides],
                              out / arm / f"seed{seed}")
            runs.append(run)
            report(run)
            write_json(out / "runs.json", [dataclasses.asdict(r) for r in runs])
        if args.optuna:
            baseline = [r.epochs_spent for r in runs if r.arm == BASELINE]
            budget = (statistics.fmean(baseline) if baseline
                      else hyperband_epochs(args.R, args.eta))
            run = run_optuna(seed, [*common, f"seed={seed}"], budget,
                             out / OPTUNA / f"seed{seed}.json")
            runs.append(run)
            report(run)
            write_json(out / "runs.json", [dataclasses.asdict(r) for r in runs])
    summary = summarize(runs, names)
    write_json(out / "summary.json", {"dataset": args.dataset, "R": args.R, "eta": args.eta,
                                      "seeds": seeds, "overrides": args.overrides,
                                      "arms_overrides": arms, **summary})
    table = markdown(summary)
    (out / "summary.md").write_text(table)
    plot(runs, names, out / "best_so_far.png",
         f"{args.dataset}, R={args.R}, eta={args.eta}, {len(seeds)} seeds")
    target = summary["random_best_target"]
    print()
    print(table)
    if target is not None:
        print(f"random's mean best: {target:.4f}")
    print(f"outputs: {out}")


def report(run: Run) -> None:
    best = "-" if run.best_accuracy is None else f"{run.best_accuracy:.4f}"
    print(f"seed {run.seed} {run.arm}: best {best}, search {run.wall_time_s:.1f} s, process "
          f"{run.process_s:.1f} s, {run.epochs_spent:g} epochs", flush=True)


def main() -> int:
    args = parser().parse_args()
    try:
        if args.optuna_worker:
            optuna_worker(args.optuna_worker, args.overrides, args.budget_epochs)
        else:
            compare(args)
    except UsageError as e:
        print(f"compare_search: error: {e}", file=sys.stderr)
        return 2
    except ChildError as e:
        print(f"compare_search: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
