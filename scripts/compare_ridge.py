"""A tuned MLP against a ridge regression on scikit-learn's diabetes data, on one split.

    python scripts/compare_ridge.py --seeds 0 1 2 --R 27

For each seed: ``packexp.tune(objective="regression")`` on the arrays (the regression search
space, targets standardised on the training split), and scikit-learn's ``RidgeCV`` on the
same training rows (``packexp.data.split_values`` at that seed), features standardised on
them. Prints each one's validation R² (docs/objectives.md, "Regression").
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

VAL_FRACTION = 0.2  # passed to the search too, so both hold out the same rows


def ridge_r2(x: np.ndarray, y: np.ndarray, seed: int) -> float:
    """``RidgeCV``'s validation R² on packexp's split of ``x`` and ``y`` at ``seed``."""
    from sklearn.linear_model import RidgeCV
    from sklearn.metrics import r2_score
    from sklearn.preprocessing import StandardScaler

    from packexp.data import split_values

    data = split_values("diabetes", x, y, VAL_FRACTION, seed)
    scaler = StandardScaler().fit(data.x_train)
    ridge = RidgeCV(alphas=np.logspace(-3, 3, 25)).fit(scaler.transform(data.x_train),
                                                       data.y_train)
    return float(r2_score(data.y_val, ridge.predict(scaler.transform(data.x_val))))


def mlp_r2(x: np.ndarray, y: np.ndarray, seed: int, R: int, overrides: Sequence[str],
           run_dir: Path) -> tuple[float, dict, float]:
    """The search's best validation R², its configuration, and its seconds."""
    import packexp

    start = time.perf_counter()
    result = packexp.tune(data=(x, y), objective="regression", seed=seed, tracking="none",
                          scheduler={"R": R}, dataset={"val_fraction": VAL_FRACTION},
                          overrides=list(overrides), run_dir=run_dir)
    seconds = time.perf_counter() - start
    # The objective is val_mse; on one validation set the lowest MSE is the highest R².
    return float(result.trials_dataframe()["val_r2"].max()), result.best_params, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--R", type=int, default=27, help="scheduler.R: most epochs a trial trains")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the search")
    args = parser.parse_args()
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)  # targets 25..346: a disease progression score
    print(f"diabetes: {len(y)} rows, {x.shape[1]} features, R={args.R}, "
          f"overrides={args.overrides}")
    print(f"{'seed':>4}  {'ridge R²':>8}  {'MLP R²':>8}  {'gap':>6}  {'search s':>8}  best")
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            ridge = ridge_r2(x, y, seed)
            mlp, best, seconds = mlp_r2(x, y, seed, args.R, args.overrides,
                                        Path(root) / f"seed{seed}")
            print(f"{seed:>4}  {ridge:8.3f}  {mlp:8.3f}  {mlp - ridge:+6.3f}  {seconds:8.1f}  "
                  f"{best}", flush=True)


if __name__ == "__main__":
    main()
