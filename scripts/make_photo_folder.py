"""Writes a folder of class subfolders of JPEG photos, for the streamed-data benchmarks.

Each class is a colour, drawn as a blob at a random place over noise, so a small CNN can
learn it and decoding costs what a real photo's does. Deterministic for a seed.

    python scripts/make_photo_folder.py data/photos --images 20000 --size 256 --classes 10
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

COLOURS = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
                    [210, 245, 60], [250, 190, 212]], np.uint8)


def write(args: tuple[Path, int, int, int, int]) -> int:
    from PIL import Image

    root, start, stop, size, classes = args
    for i in range(start, stop):
        rng = np.random.default_rng(i)
        label = i % classes
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8) // 2
        r = size // 4
        cy, cx = rng.integers(r, size - r, 2)
        yy, xx = np.ogrid[:size, :size]
        blob = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        pixels[blob] = COLOURS[label % len(COLOURS)] // (1 + label // len(COLOURS))
        Image.fromarray(pixels).save(root / f"class{label:02d}" / f"{i:06d}.jpg", quality=90)
    return stop - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--size", type=int, default=256, help="side in pixels")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    for c in range(args.classes):
        (args.folder / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    step = 500
    jobs = [(args.folder, lo, min(lo + step, args.images), args.size, args.classes)
            for lo in range(0, args.images, step)]
    with ProcessPoolExecutor(args.workers) as pool:
        written = sum(pool.map(write, jobs))
    size = sum(f.stat().st_size for f in args.folder.rglob("*.jpg"))
    print(f"{written} images of {args.size}x{args.size} in {args.folder} "
          f"({size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
