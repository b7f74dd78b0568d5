#!/usr/bin/env bash
# The wheel runs without the checkout: built, installed in a clean virtualenv outside it (pip's
# cache may serve the dependencies; the checkout's .venv is not used), then run from an empty
# directory: a seconds-long search, `packexp --help`, and packexp.tune on NumPy arrays.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --upgrade pip
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" .
wheel=$(ls "$work"/dist/packexp-*.whl)
echo "check_wheel: $(basename "$wheel"): $("$py" -c "import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); print(len(n), 'files,', sum(x.endswith('.yaml') for x in n), 'YAML')" "$wheel")"
"$py" -m pip install --quiet "$wheel"
mkdir "$work/elsewhere"
cd "$work/elsewhere"
export TF_CPP_MIN_LOG_LEVEL=2
export PACKEXP_HOME="$work/home"  # where packexp.tune keeps its runs (~/packexp by default)
"$py" -m packexp scheduler.R=3 tracking=none > search.log
test -f outputs/runs/*/results.json || { echo "check_wheel: no results.json under ./outputs"; exit 1; }
"$work/venv/bin/packexp" --help > help.txt
grep -q "strategy: batch_size, cost, knn, none, random" help.txt || {
  echo "check_wheel: packexp --help does not list the config groups"; cat help.txt; exit 1; }
"$py" - <<'PY'
import numpy as np

import packexp

rng = np.random.default_rng(0)
x = rng.normal(size=(300, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
result = packexp.tune(data=(x, y), scheduler={"R": 3}, tracking="none")
assert result.best_val_accuracy > 0.5, result.best
assert "site-packages" in packexp.conf_dir(), packexp.conf_dir()
print(f"check_wheel: packexp.tune from the wheel: best {result.best_val_accuracy:.3f}")
PY
test -f "$PACKEXP_HOME"/runs/*/results.json || {
  echo "check_wheel: packexp.tune left no results.json under \$PACKEXP_HOME/runs"; exit 1; }
echo "check_wheel: python -m packexp, packexp --help and packexp.tune ran from $work/elsewhere"
