"""The plots a finished search draws (``records.plots.write_plots``), timed on its own.

    python scripts/bench_plots.py RUN_DIR [RUN_DIR ...] [--repeats 5]
    PYTHONPATH=/path/to/old/tree python scripts/bench_plots.py RUN_DIR ...

For each run directory's ``results.json``, draws every plot it gets once to warm up, then
``--repeats`` more times into a temporary directory, and prints the median seconds of one
``write_plots``; the last line is the sum of the medians. The same file times an earlier
tree (``PYTHONPATH``): run the two trees in turn, in one session, and compare.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from packexp.runner.study import load

    total = 0.0
    with tempfile.TemporaryDirectory() as out:
        for run_dir in args.run_dirs:
            results = load(run_dir)
            drawn = results.write_plots(Path(out))
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                results.write_plots(Path(out))
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            total += median
            print(f"{run_dir}: {len(drawn)} plots, median {median:.3f} s "
                  f"({min(times):.3f}-{max(times):.3f})")
    print(f"sum of medians: {total:.3f} s")


if __name__ == "__main__":
    main()
