#!/usr/bin/env bash
# One command for the day a GPU machine is lent: what packexp can only measure there, in one
# report file. Sized to finish within 8 minutes on one GPU.
#
#   bash scripts/gpu_check.sh [REPORT]     (default: outputs/gpu_check/report.md)
#
# 1. installs (make install: PyPI must be reachable, or a venv with TensorFlow for the GPU
#    must exist at $VENV) and says what TensorFlow sees;
# 2. runs the gpu-marked tests (NVML, device memory, the GPU's own paths);
# 3. runs the headline search, strategy=none, knn and cost, model=mobilenet at R=3, timed as
#    whole processes, and keeps each results.json's phases;
# 4. runs the stream benchmark (scripts/bench_stream.py) on a folder it makes: none and knn
#    on a streamed folder, decoding measured.
# Each step has its own time limit, so one that hangs cannot take the others' time; a step
# that fails is reported and the next one runs.
set -u
cd "$(dirname "$0")/.."
REPORT=${1:-outputs/gpu_check/report.md}
OUT=$(dirname "$REPORT")
VENV=${VENV:-.venv}
PY=$VENV/bin/python
mkdir -p "$OUT"
: >"$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }
step() {  # step NAME LIMIT_S COMMAND...: runs it, its tail and exit status into the report
    local name=$1 limit=$2; shift 2
    say ""; say "## $name"; say ""
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    say "exit $rc after $((SECONDS - t0)) s (limit $limit s); the log's last lines:"
    say '```'; tail -n 25 "$OUT/$name.log" | tee -a "$REPORT" >/dev/null; say '```'
}

say "# packexp GPU check, $(date -u +%F' '%T) UTC, commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 \
    | sed 's/^/GPU: /' | tee -a "$REPORT"

step install 240 make install VENV="$VENV"
step tensorflow 60 "$PY" -c "import tensorflow as tf; print(tf.__version__, \
tf.config.list_physical_devices('GPU'))"
step gpu_tests 150 "$PY" -m pytest -q -m gpu -p no:randomly tests
for strategy in none knn cost; do
    step "headline_$strategy" 120 /usr/bin/time -f "whole process %e s" "$PY" -m packexp \
        model=mobilenet strategy=$strategy scheduler.R=3 tracking=none \
        hydra.run.dir="$OUT/headline_$strategy"
done
"$PY" - "$OUT" <<'PYEOF' | tee -a "$REPORT"
import json, sys
from pathlib import Path
print("\n## headline phases (results.json)\n")
print("| strategy | search s | packs | best | build | trace | train | eval | probe |")
print("|---|---|---|---|---|---|---|---|---|")
for s in ("none", "knn", "cost"):
    f = Path(sys.argv[1]) / f"headline_{s}" / "results.json"
    if not f.exists():
        print(f"| {s} | (no results) |||||||")
        continue
    r = json.loads(f.read_text())
    p = r.get("phases", {})
    print(f"| {s} | {r['wall_time_s']} | {len(r['packs'])} | {r['best'].get('val_accuracy')} | "
          + " | ".join(str(p.get(k)) for k in ("build_s", "trace_s", "train_s", "eval_s",
                                               "probe_s")) + " |")
PYEOF
step photos 60 "$PY" scripts/make_photo_folder.py "$OUT/photos" --images 4000 --size 256
step stream_bench 150 "$PY" scripts/bench_stream.py "$OUT/photos" --image-size 64 --R 3 \
    --arms none:none,knn:none --out "$OUT/stream"
say ""; say "report: $REPORT"
