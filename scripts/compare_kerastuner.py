"""KerasTuner's Hyperband against packexp's packed Hyperband (knn) on the same problem.

Usage: python scripts/compare_kerastuner.py [--R 9] [--eta 3] [--seed 0] [--json PATH]
                                            [overrides ...]

Both searches get the same data, model, search space, R, eta and seed (the Hydra overrides
choose them; the default is packexp's: mlp3 on digits over Table 3). Each runs in its own
child process of this script, one after the other, so both start from a cold TensorFlow.
It prints each one's search wall time, their ratio and each one's best validation accuracy.
Needs the ``bench`` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def keras_model(cfg: Any, build_model: Any, data: Any, hparams: dict) -> Any:
    """What a Keras user writes: mlp3's layers with the activation built in (packexp's mlp3
    selects it at run time, computing every choice), other models as packexp builds them.
    compare_search.py's Optuna arm trains the same."""
    import keras

    if cfg.model._target_ != "packexp.models.mlp3.build":
        return build_model(data.input_shape, data.num_classes, hparams)
    width = hparams.get("width", cfg.model.get("width", 64))
    layers = [keras.Input(tuple(data.input_shape))]
    if len(data.input_shape) > 1:
        layers.append(keras.layers.Flatten())
    layers += [keras.layers.Dense(width, activation=hparams.get("activation", "relu"))
               for _ in range(hparams.get("depth", cfg.model.get("depth", 3)))]
    return keras.Sequential([*layers, keras.layers.Dense(data.num_classes)])


def run_packexp(overrides: list[str], run_dir: Path) -> dict[str, Any]:
    """packexp's search (strategy=knn) in a child process; its results.json."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, "-m", "packexp", "strategy=knn", "tracking=none",
           f"hydra.run.dir={run_dir}", *overrides]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"compare_kerastuner: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    results = json.loads((run_dir / "results.json").read_text())
    best = results["best"] or {}
    return {"wall_time_s": results["wall_time_s"], "process_s": process_s,
            "best_val_accuracy": best.get("val_accuracy"), "best_hparams": best.get("hparams"),
            "configurations": len(results["trials"]), "packs": len(results["packs"])}


def run_kerastuner(overrides: list[str], out: Path) -> dict[str, Any]:
    """KerasTuner's search in a child process (this script with --kerastuner-worker)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, __file__, "--kerastuner-worker", str(out), *overrides]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"compare_kerastuner: the KerasTuner search failed:\n{done.stderr[-2000:]}")
    return {**json.loads(out.read_text()), "process_s": process_s}


def kerastuner_worker(out: Path, overrides: list[str]) -> None:
    """Runs KerasTuner's Hyperband on packexp's data, model builder, space and optimizers."""
    import keras
    import keras_tuner as kt
    import numpy as np
    from hydra.utils import instantiate

    from packexp.config import fit_dataset_to_model
    from packexp.space.dimensions import FloatRange, IntRange
    from packexp.space.options import OPTIMIZERS

    cfg = compose(overrides)
    fit_dataset_to_model(cfg)  # dataset.images: auto, as packexp resolves it
    dataset = instantiate(cfg.dataset)
    build_model = instantiate(cfg.model)
    space = instantiate(cfg.search_space)

    def features(x: np.ndarray) -> np.ndarray:  # packexp's on-device scaling, done up front
        return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)

    def hyperparameter(hp: kt.HyperParameters, dim: Any) -> Any:
        """The KerasTuner hyper-parameter of one of packexp's dimensions."""
        if isinstance(dim, IntRange):
            return hp.Int(dim.name, dim.low, dim.high, step=dim.step)
        if isinstance(dim, FloatRange):
            return hp.Float(dim.name, dim.low, dim.high,
                            sampling="log" if dim.log else "linear")
        return hp.Choice(dim.name, list(dim.values))

    def plain_model(hparams: dict) -> keras.Model:
        return keras_model(cfg, build_model, dataset, hparams)

    def keras_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
        """Keras's own class with packexp's defaults for the name (packexp runs its rules)."""
        spec = OPTIMIZERS[name]
        return getattr(keras.optimizers, spec.keras_class)(learning_rate=learning_rate,
                                                           **spec.options)

    class PackexpHyperModel(kt.HyperModel):
        def build(self, hp: kt.HyperParameters) -> keras.Model:
            hparams = {name: hyperparameter(hp, dim) for name, dim in space.dims.items()}
            model = plain_model(hparams)
            model.compile(optimizer=keras_optimizer(hparams["optimizer"],
                                                    hparams["learning_rate"]),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
            return model

        def fit(self, hp: kt.HyperParameters, model: keras.Model, *args: Any,
                **kwargs: Any) -> Any:
            return model.fit(*args, batch_size=hp.get("batch_size"), **kwargs)

    with tempfile.TemporaryDirectory() as tmp:
        tuner = kt.Hyperband(PackexpHyperModel(), objective="val_accuracy",
                             max_epochs=int(cfg.scheduler.R), factor=int(cfg.scheduler.eta),
                             hyperband_iterations=1, seed=int(cfg.seed), directory=tmp,
                             project_name="compare", overwrite=True)
        start = time.perf_counter()
        tuner.search(features(dataset.x_train), dataset.y_train,
                     validation_data=(features(dataset.x_val), dataset.y_val), verbose=0)
        wall = time.perf_counter() - start
        [best] = tuner.oracle.get_best_trials(1)
        out.write_text(json.dumps({
            "wall_time_s": wall, "best_val_accuracy": float(best.score),
            "best_hparams": {k: v for k, v in best.hyperparameters.values.items()
                             if not k.startswith("tuner/")},
            "configurations": len(tuner.oracle.trials)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--R", type=int, default=9, help="most epochs per configuration")
    p.add_argument("--eta", type=int, default=3, help="Hyperband's reduction factor")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the summary here")
    p.add_argument("--kerastuner-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", default=[],
                   help="Hydra overrides for both searches (model, dataset, search_space)")
    args = p.parse_args()
    overrides = [f"scheduler.R={args.R}", f"scheduler.eta={args.eta}", f"seed={args.seed}",
                 *args.overrides]
    if args.kerastuner_worker:
        kerastuner_worker(args.kerastuner_worker, overrides)
        return

    from rich.console import Console
    from rich.table import Table

    cfg = compose(overrides)
    with tempfile.TemporaryDirectory() as tmp:
        packed = run_packexp(overrides, Path(tmp) / "packexp")
        tuner = run_kerastuner(overrides, Path(tmp) / "kerastuner.json")
    summary = {"model": cfg.model._target_.rsplit(".", 2)[-2],
               "dataset": cfg.dataset._target_.rsplit(".", 2)[-2], "R": args.R,
               "eta": args.eta, "seed": args.seed, "overrides": args.overrides,
               "packexp_knn": packed, "kerastuner_hyperband": tuner,
               "wall_time_ratio": tuner["wall_time_s"] / packed["wall_time_s"]}
    table = Table(title=f"Hyperband R={args.R}, eta={args.eta}, seed {args.seed}: "
                        f"{summary['model']} on {summary['dataset']}")
    for column in ("search", "wall time s", "process s", "configurations",
                   "best val_accuracy", "best hparams"):
        table.add_column(column, justify="left" if column in ("search", "best hparams")
                         else "right")
    for name, result in (("packexp knn", packed), ("KerasTuner Hyperband", tuner)):
        table.add_row(name, f"{result['wall_time_s']:.1f}", f"{result['process_s']:.1f}",
                      str(result["configurations"]), f"{result['best_val_accuracy']:.4f}",
                      json.dumps(result["best_hparams"]))
    console = Console(width=200)
    console.print(table)
    console.print(f"wall time ratio, KerasTuner / packexp: {summary['wall_time_ratio']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
