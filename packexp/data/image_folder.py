"""A folder of class subfolders of JPEG/PNG images, resized to one size."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from packexp.data import Dataset, split
from packexp.data.streamed import (
    Files,
    StreamedImages,
    augmentation,
    check_cache,
    check_stream_keys,
    fits_memory,
    magic_ok,
    stratified,
)
from packexp.errors import ConfigError

EXTENSIONS = frozenset({".jpg", ".jpeg", ".png"})


def load(
    path: str | None = None,
    image_size: Sequence[int] = (32, 32),
    val_fraction: float = 0.2,
    seed: int = 0,
    cache: str = "auto",
    memory_share: float = 0.25,
    block: int = 512,
    prefetch: int = 2,
    parallel: int | None = None,
    epoch_size: int | None = None,
    augment: Mapping[str, Any] | None = None,
) -> Dataset | StreamedImages:
    """Loads ``path/<class>/<image>``; classes are the sorted subfolder names.

    Args:
        path: The folder of class subfolders.
        image_size: ``[height, width]`` every image is resized to.
        val_fraction: Share held out for validation, stratified by class.
        seed: Seed of the split (and of a streamed epoch's order).
        cache: ``memory`` decodes every image once, into memory; ``none`` streams them from
            their files, block by block, in every epoch; ``auto`` keeps them in memory when
            decoded they take at most ``memory_share`` of the memory available.
        memory_share: The share of available memory ``cache=auto`` may fill.
        block: Images a stream decodes per block (its memory: about ``prefetch + 2`` blocks).
        prefetch: Blocks a stream decodes ahead of training.
        parallel: Images a stream decodes at once; None: one per usable CPU.
        epoch_size: Images in an epoch (Hyperband's unit), each epoch a new draw of them
            from the whole training split; None: all of them. Streams only: it makes
            ``cache=auto`` stream.
        augment: ``{flip: bool, crop_padding: int}``, training augmentation done in the
            stream, once per image and epoch for a whole pack, seeded by (seed, epoch, row).
            Streams only, as ``epoch_size``.

    Returns:
        In memory: uint8 ``[n, height, width, 3]`` RGB images and int32 labels. Streamed:
        the same split as paths and labels (``data.streamed.StreamedImages``).
    """
    check_cache(cache)
    augments = augmentation(augment)
    check_stream_keys(memory_share, block, prefetch, epoch_size, cache, augments)
    height, width = _size(image_size)
    root = Path(path).expanduser() if path is not None else None
    if root is None or not root.is_dir():
        raise ConfigError(f"dataset.path={path}: not a folder; pass a folder of class subfolders "
                          "of JPEG/PNG images as dataset.path=...")
    # Hidden folders are tool litter (.ipynb_checkpoints, .git), never classes.
    classes = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    files = [sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in EXTENSIONS)
             for d in classes]
    if not any(files):
        raise ConfigError(f"dataset.path={path}: no class subfolders of JPEG/PNG images")
    for d, class_files in zip(classes, files, strict=True):
        if len(class_files) < 2:
            raise ConfigError(f"dataset.path: class {d.name!r} has {len(class_files)} images; "
                              "a stratified split needs at least 2 per class")
    y = np.concatenate([np.full(len(fs), label, np.int32) for label, fs in enumerate(files)])
    paths = [f for class_files in files for f in class_files]
    if cache != "memory":
        streamed = _streamed(paths, y, len(classes), (height, width), val_fraction, seed,
                             block, prefetch, parallel, epoch_size, augments)
        if (cache == "none" or epoch_size is not None or any(augments.values())
                or not fits_memory(streamed.decoded_bytes(), memory_share)):
            for f in paths:
                if not magic_ok(f):
                    raise ConfigError(f"dataset.path: {f}: cannot decode image (not a JPEG or "
                                      "PNG image)")
                if not ends_whole(f):
                    # TensorFlow's decoder would log its own line of a cut JPEG before the
                    # stream's error; PIL, which logs nothing, names the file now, at load.
                    _decode(f, height, width)
            return streamed
    x = np.stack([_decode(f, height, width) for f in paths])
    return split("image_folder", x, y, val_fraction, seed, num_classes=len(classes))


# How a whole file ends: JPEG's end-of-image marker, PNG's IEND chunk.
END_MARKERS = (b"\xff\xd9", b"IEND\xaeB`\x82")


def ends_whole(path: Path, tail: int = 1024) -> bool:
    """Whether the image file's last ``tail`` bytes hold its format's end marker: a file cut
    short (a copy or a download that stopped) does not. A whole file with data past the
    marker (a camera's appended video) does not either, and decodes."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - tail))
        end = f.read()
    return any(marker in end for marker in END_MARKERS)


def _streamed(paths: list[Path], y: np.ndarray, num_classes: int, size: tuple[int, int],
              val_fraction: float, seed: int, block: int, prefetch: int,
              parallel: int | None, epoch_size: int | None,
              augments: Mapping[str, Any]) -> StreamedImages:
    """The split ``split`` makes of the same images, as paths."""
    train, val = stratified(y, val_fraction, seed)
    return StreamedImages("image_folder", Files(tuple(str(paths[i]) for i in train)), y[train],
                          Files(tuple(str(paths[i]) for i in val)), y[val], num_classes, size,
                          seed=seed, block=block, prefetch=prefetch, parallel=parallel,
                          epoch_size=epoch_size, **augments)


def _size(image_size: Sequence[int]) -> tuple[int, int]:
    size: tuple[int, ...] = ()
    # A string is a sequence too, but "32" must not become (3, 2).
    if not isinstance(image_size, str):
        with contextlib.suppress(TypeError, ValueError):
            size = tuple(int(v) for v in image_size)
    if len(size) != 2 or min(size) < 1:
        raise ConfigError(f"dataset.image_size={image_size!r}: must be [height, width], both >= 1")
    return size[0], size[1]


def _decode(file: Path, height: int, width: int) -> np.ndarray:
    try:
        with Image.open(file) as image:
            # PIL sizes are (width, height).
            resized = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        # PIL's own message for an unknown format repeats the whole path.
        reason = ("not a JPEG or PNG image" if isinstance(e, UnidentifiedImageError)
                  else " ".join(str(e).split()) or type(e).__name__)
        raise ConfigError(f"dataset.path: {file}: cannot decode image ({reason})") from None
    return np.asarray(resized, dtype=np.uint8)
