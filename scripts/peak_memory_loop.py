"""The loop behind tests/engine/test_memory.py's peak-memory tests.

    python scripts/peak_memory_loop.py 30          # np.empty's block, the collector on
    FIX=1 python scripts/peak_memory_loop.py 30    # the collector off (the test at 4598a30)
    FIX=2 python scripts/peak_memory_loop.py 30    # and a fresh mapping (the test now)
    CAUSE=2 FIX=1 python scripts/peak_memory_loop.py 30   # the second cause, as at 4598a30
    CAUSE=2 FIX=2 python scripts/peak_memory_loop.py 30   # the second cause, the test now

Cyclic garbage left by earlier work (Keras models are full of cycles) is freed by a collection
that runs inside the span, so the resident set falls while the 50 MB block is filled and the
span sees less growth than the block (39.7 MB in a fresh-clone run of the suite). Each trial
leaves 20 MB in cycles and lowers the collector's thresholds, as a long session's counts do.

CAUSE=2 makes the second cause the test met (a fresh clone at 4598a30: 19.0 MB, the collector
off), most likely: glibc's malloc hands ``np.empty`` pages that are already resident.
Freeing a block malloc had mapped raises its mmap threshold to that block's size, if no more
than 32 MB (64-bit), so earlier tests' arrays of a few MB come from the heap; freed together
below a live one, they leave a free chunk larger than 50 MB whose pages stay resident, and
malloc serves the 50 MB block from it before it maps fresh memory. The heap keeps one such
120 MB free chunk; a 3 MB array above it stays live. Prints how many spans saw under 45 MB;
exits 1 if any did.
"""

from __future__ import annotations

import gc
import mmap
import os
import sys

import numpy as np

from packexp import telemetry

MB = 2**20


def main() -> int:
    fix = int(os.environ.get("FIX", "0"))
    cause = int(os.environ.get("CAUSE", "1"))
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    fails = 0
    pinned = None
    # PeakMemory asks TensorFlow for a GPU, importing it, on first use: done here, so that the
    # import's allocations do not fill the free chunk CAUSE=2 prepares.
    telemetry.gpu_device()
    for _ in range(runs):
        if cause == 2:
            # Earlier tests' arrays: a freed mapped block raises malloc's mmap threshold to
            # 8 MB, thirty 4 MB arrays then come from the heap, a live array above them keeps
            # the heap from shrinking when they are freed.
            np.ones(8 * MB, np.uint8)  # mapped by malloc, freed at once
            arrays = [np.ones(4 * MB, np.uint8) for _ in range(30)]
            if pinned is None:  # later trials reuse the free chunk below it
                pinned = np.ones(3 * MB, np.uint8)
            del arrays
        else:
            # Earlier tests' garbage: reference cycles holding 20 MB (a Keras model is full of
            # cycles).
            for _ in range(20):
                a = {"data": np.ones(MB, np.uint8)}
                a["self"] = a
            del a
            gc.set_threshold(50, 1, 1)  # a full collection soon, as a long session makes it
        if fix:
            gc.collect()
            gc.disable()
        try:
            with telemetry.PeakMemory() as span:
                if fix == 2:  # as tests/engine/test_memory.py's touched()
                    block = mmap.mmap(-1, 50 * MB)
                    view = np.frombuffer(block, np.uint8)
                    view.fill(1)
                    del view
                else:
                    block = np.empty(50 * MB, np.uint8)
                    block.fill(1)
        finally:
            gc.enable()
        grew = span.growth_bytes / MB
        fails += grew < 45
        if fix == 2:
            block.close()
        del block
        gc.collect()
    print(f"CAUSE={cause} FIX={fix}: {fails} of {runs} spans saw under 45 MB of growth")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
