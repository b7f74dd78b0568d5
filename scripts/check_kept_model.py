"""Issue 66's first target, end to end: a digits search from Python on raw arrays (plain packs,
R=9, tracked in a sqlite store), then the best model's accuracy on the raw validation rows as
``best_model()``, as plain Keras in a fresh process that never imports packexp, and as the
MLflow pyfunc model, against the recorded one; then a refit.

    python scripts/check_kept_model.py /tmp/kept-check
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="an empty directory for the run and its store")
    root = parser.parse_args().root.resolve()
    import mlflow.pyfunc
    from sklearn.datasets import load_digits

    import packexp
    from packexp.data import split

    digits = load_digits()
    result = packexp.tune(data=(digits.data, digits.target), pack={"fusion": "off"},
                          scheduler={"R": 9}, tracking="mlflow", run_dir=root / "run",
                          overrides=[f"tracking.store_dir={root / 'store'}"])
    val = split("raw", digits.data, digits.target, 0.2, 0, num_classes=10)
    ours = result.best_model().predict(val.x_val, verbose=0)
    print(f"recorded val_accuracy {result.best['val_accuracy']:.4f}; best_model() "
          f"{(ours.argmax(1) == val.y_val).mean():.4f}")
    np.save(root / "rows.npy", val.x_val)
    fresh = (f"import sys, numpy as np, keras\n"
             f"m = keras.saving.load_model({str(result.run_dir / result.best['model'])!r})\n"
             f"np.save({str(root / 'fresh.npy')!r}, m.predict(np.load({str(root / 'rows.npy')!r}),"
             f" verbose=0))\n"
             f"print(any(k.split('.')[0] == 'packexp' for k in sys.modules))")
    done = subprocess.run([sys.executable, "-c", fresh], cwd=root, capture_output=True,
                          text=True, check=True)
    theirs = np.load(root / "fresh.npy")
    print(f"plain Keras in a fresh process (packexp imported: {done.stdout.strip()}): "
          f"{(theirs.argmax(1) == val.y_val).mean():.4f}, max |difference| "
          f"{float(np.abs(theirs - ours).max())}")
    mlflow.set_tracking_uri(f"sqlite:///{root / 'store' / 'mlflow.db'}")
    served = np.asarray(mlflow.pyfunc.load_model(result.results["mlflow_model"]["uri"])
                        .predict(pd.DataFrame(val.x_val)))
    print(f"MLflow pyfunc: {(served.argmax(1) == val.y_val).mean():.4f}, equal to best_model()'s: "
          f"{np.array_equal(served, ours)}")
    refit = packexp.refit(result.run_dir)  # the model; its file is results.json's refit
    everything = (refit.predict(digits.data, verbose=0).argmax(1) == digits.target).mean()
    print(f"refit: loadable; {everything:.4f} on all rows, which it trained on")


if __name__ == "__main__":
    main()
