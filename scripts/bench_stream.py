"""Streamed image folders: decoding throughput, and whole searches by strategy and cache.

For each (strategy, cache) arm it runs ``python -m packexp`` on the folder, timed as a whole
process, arms alternating (A B A B ...) so that the machine's drift falls on all of them,
and reads each run's ``results.json`` for its phases (build, trace, train, eval, probe, the
start-up) and its scores. It prints the medians as a Markdown table, checks that the
strategies found the same scores within a cache mode, and writes everything to --out.

    python scripts/make_photo_folder.py /tmp/photos --images 2000 --size 256
    python scripts/bench_stream.py /tmp/photos --image-size 64 --R 9 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("build_s", "trace_s", "train_s", "eval_s", "probe_s", "checkpoint_s")
COLUMNS = ("startup_s", "read_s", *PHASES)  # read_s: waiting for blocks, not in train_s


def decode_rate(folder: Path, size: int, block: int) -> tuple[float, int]:
    """Images per second one pass of the stream decodes and resizes (no training)."""
    from packexp.data import image_folder

    data = image_folder.load(str(folder), image_size=[size, size], cache="none", block=block)
    next(data.train_blocks(1, 0, block))  # TensorFlow's and tf.data's start, not counted
    t0 = time.perf_counter()
    n = sum(int(x.shape[0]) for x, _ in data.train_blocks(0, 0, data.train_size))
    return n / (time.perf_counter() - t0), n


def run(folder: Path, arm: dict, size: int, R: int, out: Path, extra: list[str]) -> dict:
    run_dir = out / f"{arm['name']}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "packexp", "dataset=image_folder", f"dataset.path={folder}",
           f"dataset.image_size=[{size},{size}]", f"dataset.cache={arm['cache']}",
           "model=cnn", f"strategy={arm['strategy']}", f"scheduler.R={R}", "tracking=none",
           "pack.fusion=off", f"hydra.run.dir={run_dir}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{arm['name']} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    results = json.loads((run_dir / "results.json").read_text())
    scores = {t["trial_id"]: [r.get("val_accuracy") for r in t["rungs"]]
              for t in results["trials"]}
    return {"arm": arm["name"], "process_s": wall, "search_s": results.get("wall_time_s"),
            "packs": len(results["packs"]),
            "phases": {**{k: results["phases"].get(k) for k in PHASES},
                       "read_s": sum(p.get("read_s", 0.0) for p in results["packs"]),
                       "startup_s": results.get("startup_s")}, "scores": scores,
            "best": results["best"]["val_accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--R", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--arms", default="none:none,knn:none,none:auto,knn:auto",
                        help="strategy:cache pairs")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_stream"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every arm")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rate, n = decode_rate(args.folder, args.image_size, args.block)
    print(f"decode: {rate:.0f} images/s ({n} training images, {args.image_size}px, "
          f"block {args.block})", flush=True)
    arms = [{"name": pair.replace(":", "-"), "strategy": pair.split(":")[0],
             "cache": pair.split(":")[1]} for pair in args.arms.split(",")]
    runs = []
    for repeat in range(args.repeats):
        for arm in arms:
            r = run(args.folder, arm, args.image_size, args.R, args.out,
                    [f"dataset.block={args.block}", *args.overrides])
            runs.append(r)
            print(f"{repeat} {r['arm']}: process {r['process_s']:.1f} s, search "
                  f"{r['search_s']} s, {r['packs']} packs, best {r['best']}", flush=True)
    rows = ["| arm | process s (median) | search s | packs | best | "
            + " | ".join(COLUMNS) + " |", "|---" * (5 + len(COLUMNS)) + "|"]
    medians = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm["name"]]
        med = {k: statistics.median(r[k] for r in mine) for k in ("process_s", "search_s")}
        medians[arm["name"]] = med
        phases = [statistics.median((r["phases"][p] or 0) for r in mine) for p in COLUMNS]
        rows.append(f"| {arm['name']} | {med['process_s']:.1f} | {med['search_s']:.1f} | "
                    f"{mine[0]['packs']} | {mine[0]['best']} | "
                    + " | ".join(f"{p:.1f}" for p in phases) + " |")
    print("\n".join(rows))
    for cache in {a["cache"] for a in arms}:
        names = [a["name"] for a in arms if a["cache"] == cache]
        first = next(r for r in runs if r["arm"] == names[0])["scores"]
        same = all(r["scores"] == first for r in runs if r["arm"] in names)
        print(f"cache={cache}: the same scores in every arm: {same}")
        if f"none-{cache}" in medians and f"knn-{cache}" in medians:
            a, b = medians[f"none-{cache}"], medians[f"knn-{cache}"]
            print(f"cache={cache}: knn over none: process {a['process_s'] / b['process_s']:.2f}x"
                  f", search {a['search_s'] / b['search_s']:.2f}x")
    (args.out / "runs.json").write_text(json.dumps({"decode_per_s": rate, "runs": runs},
                                                   indent=1))


if __name__ == "__main__":
    main()
