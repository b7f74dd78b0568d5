"""A user's own model searched over narrow stand-ins (issue 76): a functional Keras model with
Conv1D, BatchNorm, attention and a wide Dense on mnist1d, through ``packexp.tune(...,
surrogate={"scale": S})``; then the handed-over model checked: its width (the full model's
weight count, not the stand-in's) and its accuracy on the validation rows against the one
recorded. One search per call, so the whole process can be timed from outside:

    farm-bench -n 3 --timeout 3600 \\
      --vs '.venv/bin/python scripts/bench_own_model.py --scale 1 --run-dir /tmp/own/full' \\
      -- .venv/bin/python scripts/bench_own_model.py --scale 4 --run-dir /tmp/own/s4
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def own_model(input_shape, num_classes, hparams):
    """The user's model: 2-D rows read as a 1-D signal, a Conv1D with BatchNorm, a residual
    self-attention block, a wide hidden Dense and the readout (logits)."""
    import keras

    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Reshape((input_shape[0], 1))(inputs)
    x = keras.layers.Conv1D(128, 5, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation(hparams.get("activation", "relu"))(x)
    x = keras.layers.Add()([x, keras.layers.MultiHeadAttention(4, 32)(x, x)])
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(1024, activation=hparams.get("activation", "relu"))(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="own")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=4, help="surrogate.scale (1: full width)")
    parser.add_argument("--run-dir", type=Path, required=True, help="emptied first")
    parser.add_argument("--R", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shutil.rmtree(args.run_dir, ignore_errors=True)

    import numpy as np

    import packexp
    from packexp.data import mnist1d

    data = mnist1d.load(cache_dir=None, seed=args.seed)
    result = packexp.tune(own_model, (data.x_train, data.y_train, data.x_val, data.y_val),
                          surrogate={"scale": args.scale}, scheduler={"R": args.R},
                          tracking="none", seed=args.seed, run_dir=args.run_dir)
    model = result.best_model()
    full = own_model(data.x_train.shape[1:], 10, result.best_params)
    accuracy = float((model.predict(data.x_val, verbose=0).argmax(1) == data.y_val).mean())
    print(f"scale {args.scale}: searched {result.wall_time_s:.1f} s, "
          f"{len(result.trial_records)} trials; best {result.best['trial_id']} recorded "
          f"val_accuracy {result.best['val_accuracy']:.4f}, handed-over model "
          f"{accuracy:.4f} on the validation rows; its weights {model.count_params():,} "
          f"(the full model's {full.count_params():,})")
    if args.scale > 1:
        transfer = result.results["transfer"]
        print("transfer (stand-in -> full): " + ", ".join(
            f"{t['stand_in']} {t['stand_in_value']:.4f} -> {t['full_value']:.4f}"
            for t in transfer["trials"]) + f"; Spearman {transfer['rank_correlation']}")
    if model.count_params() != full.count_params() or abs(
            accuracy - result.best["val_accuracy"]) > 1e-6:
        raise SystemExit("the handed-over model is not the full model of its recorded score")
    np.save(args.run_dir / "val_predictions.npy", model.predict(data.x_val, verbose=0))


if __name__ == "__main__":
    main()
