"""Population Based Training: packexp's (scheduler=pbt), packexp's ASHA at the same epochs and
Ray Tune's PopulationBasedTraining on the same model, data and space, over several seeds.

Usage: python scripts/compare_pbt.py [--seeds 0 1 2 3 4] [--population 16] [--epochs 27]
                                     [--interval 3] [--arms pbt asha ray] [--space table3]
                                     [--json PATH]

Every arm trains mlp3 on MNIST-1D (``packexp.data.mnist1d.load(seed=S)``) over the default
search space (``conf/search_space/table3.yaml``; ``--space`` names another) with root seed
S. ``pbt`` is ``python -m packexp scheduler=pbt`` with the population, epochs and interval
given; ``asha`` is ``scheduler=asha`` with ``R`` the epochs and ``max_epochs`` population x
epochs, the same budget. ``ray`` is ordinary Ray Tune + Keras user code in a child process
of this script (``--arm ray``), so its process time, like packexp's, includes its imports
and start-up: ``tune.run`` with ``PopulationBasedTraining`` (synchronous, as packexp's is:
every interval ends for the whole population before anyone is exploited;
``perturbation_interval`` the interval, ``quantile_fraction`` 0.25), one trial per member on
one CPU of ``ray.init(num_cpus=2)``, each starting from the configuration packexp draws
(``space.sample(P, S, 0)``). A trial trains ``model.fit(epochs=1)`` per iteration, on the
model and optimizer a Keras user writes (mlp3's three Dense layers of 64 with the activation
built in; Keras's own optimizer class with packexp's defaults for the name), reports the
validation accuracy and, at each interval's end, a checkpoint of its weights and optimizer
state. Explore is packexp's own rule (``packexp.schedulers.pbt.explore``) as Ray's
``custom_explore_fn``, with no ``hyperparam_mutations``, so Ray hands it a copy of the
donor's config unchanged. An exploited trial restarts from the donor's checkpoint with the
explored config: the model is built with the new activation and given the donor's weights;
the optimizer keeps the donor's state (steps, slots) at the new learning rate when the
optimizer is the same, and starts fresh when it changed; the batch size is read by each
``fit``; Keras is seeded with the member's seed (the donor's, after an exploit) plus the
epoch it starts at. Ray Tune is installed (``ray[tune]`` at the installed Ray's version)
when missing.

The arms run back to back within a seed, their order rotated from one seed to the next, so
they share the machine's load. Prints a Markdown table: each seed's best validation accuracy
per arm (the maximum over every result reported), then per arm the mean best, the median
process and search seconds (packexp's ``wall_time_s``; Ray's time in ``tune.run``), the
median epochs trained, and the median over the seeds of Ray's process seconds over the arm's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "conf" / "search_space"
ARMS = ("pbt", "asha", "ray")
FACTORS, RESAMPLE, QUANTILE = (0.8, 1.2), 0.25, 0.25


def load_space(name: str = "table3") -> Any:
    """The search space ``conf/search_space/<name>.yaml``, as packexp builds it."""
    from omegaconf import OmegaConf

    from packexp.space import SearchSpace

    cfg = OmegaConf.to_container(OmegaConf.load(SPACES / f"{name}.yaml"), resolve=True)
    return SearchSpace(cfg["params"], cfg.get("categorical", ()))


def explorer(space: Any, seed: int, log: list | None = None):
    """Ray's ``custom_explore_fn``: packexp's explore of the config Ray passes (the donor's,
    copied; other keys such as ``seed`` kept), from a generator seeded with ``seed``; each
    ``(given, explored)`` pair appended to ``log``."""
    import numpy as np

    from packexp.schedulers.pbt import explore

    rng = np.random.default_rng(seed)

    def explore_fn(config: dict) -> dict:
        new = explore(config, space, rng, factors=FACTORS, resample_probability=RESAMPLE)
        if log is not None:
            log.append({"given": dict(config), "explored": new})
        return new
    return explore_fn


def order(arms: list[str], turn: int) -> list[str]:
    """``arms`` rotated by ``turn``."""
    k = turn % len(arms)
    return [*arms[k:], *arms[:k]]


def packexp_arm(arm: str, seed: int, p: int, e: int, i: int, run_dir: Path,
                space: str = "table3") -> dict:
    """One packexp search in a child process: its results and the process's seconds."""
    own = ([f"scheduler.population={p}", f"scheduler.epochs={e}", f"scheduler.interval={i}"]
           if arm == "pbt" else [f"scheduler.R={e}", f"scheduler.max_epochs={p * e}"])
    cmd = [sys.executable, "-m", "packexp", f"scheduler={arm}", "dataset=mnist1d",
           "model=mlp3", f"search_space={space}", *own, f"seed={seed}", "tracking=none",
           f"hydra.run.dir={run_dir}"]
    res, process_s = child(cmd, run_dir / "results.json")
    best = res.get("best") or {}
    return {"best": best.get("val_accuracy"), "best_hparams": best.get("hparams"),
            "search_s": res["wall_time_s"], "process_s": process_s,
            "epochs_spent": res.get("epochs_spent"), "programs": res.get("programs")}


def ray_arm(seed: int, p: int, e: int, i: int, out: Path, space: str = "table3") -> dict:
    """Ray Tune's PBT in a child process (this script with ``--arm ray``)."""
    cmd = [sys.executable, __file__, "--arm", "ray", "--seeds", str(seed), "--population",
           str(p), "--epochs", str(e), "--interval", str(i), "--out", str(out),
           "--space", space]
    res, process_s = child(cmd, out)
    return {**res, "process_s": process_s}


def child(cmd: list[str], out: Path) -> tuple[dict, float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"compare_pbt: {' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text()), process_s


def ensure_ray_tune() -> None:
    """Installs ``ray[tune]`` at the installed Ray's version if ``ray.tune`` cannot import."""
    if subprocess.run([sys.executable, "-c", "import ray.tune"], capture_output=True,
                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).returncode == 0:
        return
    import ray

    subprocess.check_call([sys.executable, "-m", "pip", "install", f"ray[tune]=={ray.__version__}"])


def train_member(config: dict, data: tuple, epochs: int, interval: int) -> None:
    """One PBT member: a Ray Tune function trainable, one epoch per reported iteration."""
    import keras
    import numpy as np
    from ray import tune

    from packexp.space.options import OPTIMIZERS

    x_train, y_train, x_val, y_val, num_classes = data
    epoch, state, checkpoint = 0, None, tune.get_checkpoint()
    if checkpoint:  # our own, or a donor's after an exploit
        with checkpoint.as_directory() as d, np.load(Path(d) / "state.npz") as f:
            meta, state = json.loads((Path(d) / "meta.json").read_text()), dict(f)
        epoch = meta["epoch"]
    keras.utils.set_random_seed((config["seed"] + epoch) % 2**32)  # a restart: new shuffles
    # What a Keras user writes: mlp3's layers with the activation built in (packexp's mlp3
    # selects it at run time, computing every choice) and Keras's own optimizer class with
    # packexp's defaults for the name, as compare_kerastuner.py's and compare_search.py's
    # baselines.
    model = keras.Sequential([keras.Input(x_train.shape[1:])] + [
        keras.layers.Dense(64, activation=config["activation"]) for _ in range(3)] + [
        keras.layers.Dense(num_classes)])
    spec = OPTIMIZERS[config["optimizer"]]
    optimizer = getattr(keras.optimizers, spec.keras_class)(
        learning_rate=config["learning_rate"], **spec.options)
    optimizer.build(model.trainable_variables)
    if state:
        model.set_weights([state[f"w{k}"] for k in range(meta["weights"])])
        if meta["optimizer"] == config["optimizer"]:  # else a fresh optimizer
            for k, var in enumerate(optimizer.variables):
                var.assign(state[f"o{k}"])
            optimizer.learning_rate = config["learning_rate"]
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    while epoch < epochs:
        model.fit(x_train, y_train, epochs=1, batch_size=config["batch_size"], verbose=0,
                  shuffle=True)
        epoch += 1
        acc = float(model.evaluate(x_val, y_val, batch_size=1000, verbose=0,
                                   return_dict=True)["accuracy"])
        if epoch % interval and epoch < epochs:
            tune.report({"val_accuracy": acc, "epoch": epoch})
            continue
        with tempfile.TemporaryDirectory() as d:
            arrays = {f"w{k}": w for k, w in enumerate(model.get_weights())}
            arrays |= {f"o{k}": v.numpy() for k, v in enumerate(optimizer.variables)}
            np.savez(Path(d) / "state.npz", **arrays)
            (Path(d) / "meta.json").write_text(json.dumps({
                "epoch": epoch, "optimizer": config["optimizer"],
                "weights": len(model.get_weights())}))
            tune.report({"val_accuracy": acc, "epoch": epoch},
                        checkpoint=tune.Checkpoint.from_directory(d))


def domains(space: Any) -> dict:
    """The space as Ray Tune's ``config``: the keys the members' configurations set."""
    from ray import tune

    def domain(dim: Any) -> Any:
        if dim.values is not None:
            return tune.choice(list(dim.values))
        return (tune.loguniform if dim.log else tune.uniform)(dim.low, dim.high)
    return {name: domain(dim) for name, dim in space.dims.items()} | {
        "seed": tune.randint(0, 2**32)}


def run_ray(seed: int, p: int, e: int, i: int, space_name: str = "table3") -> dict:
    """Ray Tune's PBT over the population packexp draws; every reported result recorded."""
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search import BasicVariantGenerator

    from packexp.data.mnist1d import load

    space = load_space(space_name)
    data = load(seed=seed)
    arrays = (data.x_train, data.y_train, data.x_val, data.y_val, data.num_classes)
    members = [{**t.hparams, "seed": t.seed} for t in space.sample(p, seed, 0)]
    random.seed(seed)  # Ray's PBT draws each donor with `random`

    class Record(tune.Callback):
        def __init__(self) -> None:
            self.results: list[dict] = []

        def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
            self.results.append({"trial": trial.trial_id, "iteration":
                                 result["training_iteration"], "val_accuracy":
                                 result["val_accuracy"], "config": dict(trial.config)})

    scheduler = PopulationBasedTraining(
        time_attr="training_iteration", metric="val_accuracy", mode="max",
        perturbation_interval=i, quantile_fraction=QUANTILE, synch=True,
        custom_explore_fn=explorer(space, seed, explored := []))
    record = Record()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="compare_pbt-ray-") as storage:
        start = time.perf_counter()
        tune.run(tune.with_parameters(train_member, data=arrays, epochs=e, interval=i),
                 name="pbt", config=domains(space),
                 search_alg=BasicVariantGenerator(points_to_evaluate=members),
                 num_samples=p, scheduler=scheduler, stop={"training_iteration": e},
                 resources_per_trial={"cpu": 1}, storage_path=storage, reuse_actors=True,
                 callbacks=[record], verbose=0)
        search_s = time.perf_counter() - start
    ray.shutdown()
    best = max(record.results, key=lambda r: r["val_accuracy"])
    ends = [r["val_accuracy"] for r in record.results  # where packexp's PBT evaluates
            if r["iteration"] % i == 0 or r["iteration"] == e]
    return {"best": best["val_accuracy"], "best_hparams": best["config"], "search_s": search_s,
            "best_at_interval_ends": max(ends),
            "epochs_spent": len(record.results), "programs": None,
            "exploits": explored, "ray": ray.__version__, "results": [
                {k: r[k] for k in ("trial", "iteration", "val_accuracy")}
                for r in record.results]}


def table(runs: list[dict], seeds: list[int], arms: list[str]) -> str:
    """The Markdown table of ``runs`` (each ``{"seed", "arm", "best", ...}``)."""
    at = {(r["seed"], r["arm"]): r for r in runs}

    def cell(v: float | None, digits: int = 2) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    def median(arm: str, key: str) -> float | None:
        values = [at[s, arm][key] for s in seeds if at[s, arm].get(key) is not None]
        return statistics.median(values) if values else None

    lines = ["| seed | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    lines += [f"| {s} | " + " | ".join(cell(at[s, a]["best"], 4) for a in arms) + " |"
              for s in seeds]
    rows = {"mean best": [statistics.mean(at[s, a]["best"] for s in seeds) for a in arms]}
    for label, key in (("median process s", "process_s"), ("median search s", "search_s"),
                       ("median epochs", "epochs_spent"), ("programs", "programs")):
        rows[label] = [median(a, key) for a in arms]
    if "ray" in arms:
        rows["speedup over ray (process s)"] = [statistics.median(
            at[s, "ray"]["process_s"] / at[s, a]["process_s"] for s in seeds) for a in arms]
    for label, values in rows.items():
        digits = 4 if label == "mean best" else 0 if label == "programs" else 2
        lines.append(f"| {label} | " + " | ".join(cell(v, digits) for v in values) + " |")
    return "\n".join(lines)


def main() -> None:
    summary, _usage, rest = __doc__.split("\n\n", 2)
    p = argparse.ArgumentParser(description=f"{summary}\n\n{rest}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--population", type=int, default=16)
    p.add_argument("--epochs", type=int, default=27)
    p.add_argument("--interval", type=int, default=3)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--space", default="table3",
                   help="conf/search_space/<SPACE>.yaml for every arm (default: table3)")
    p.add_argument("--json", type=Path, help="write every run's numbers here")
    p.add_argument("--arm", choices=["ray"], help=argparse.SUPPRESS)  # the child's side
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    pop, epochs, interval = args.population, args.epochs, args.interval
    if args.arm == "ray":
        args.out.write_text(json.dumps(run_ray(args.seeds[0], pop, epochs, interval,
                                                     args.space)))
        return
    if pop < 2 or not 1 <= interval <= epochs:
        p.error("needs --population >= 2 and 1 <= --interval <= --epochs")
    if "ray" in args.arms:
        ensure_ray_tune()
    runs = []
    with tempfile.TemporaryDirectory(prefix="compare_pbt-") as tmp:
        for turn, seed in enumerate(args.seeds):
            for arm in order(args.arms, turn):
                where = Path(tmp) / f"{arm}-{seed}"
                res = (ray_arm(seed, pop, epochs, interval, Path(f"{where}.json"), args.space)
                       if arm == "ray" else packexp_arm(arm, seed, pop, epochs, interval, where,
                                                        args.space))
                runs.append({"seed": seed, "arm": arm, **res})
                print(f"seed {seed}: {arm:>4} best {res['best']:.4f} search "
                      f"{res['search_s']:.2f} s, process {res['process_s']:.2f} s",
                      file=sys.stderr)
    print(f"mlp3 on mnist1d, search_space={args.space}, population {pop}, {epochs} epochs, "
          f"interval {interval}; best "
          "val_accuracy per seed\n")
    print(table(runs, args.seeds, args.arms))
    if args.json:
        args.json.write_text(json.dumps({"space": args.space, "population": pop,
                                         "epochs": epochs,
                                         "interval": interval, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
