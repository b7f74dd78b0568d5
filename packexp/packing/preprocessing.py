"""What a batch's preprocessing may be (``data.Preprocessing``'s settings), checked against the
data's shape without TensorFlow: the config's checks run before it loads, and a search on a
trainer without TensorFlow never loads it."""

from __future__ import annotations

from collections.abc import Sequence


def check_preprocessing(mean: Sequence[float] | None, std: Sequence[float] | None,
                        crop_padding: int, flip: bool, input_shape: tuple[int, ...]) -> None:
    """Raises ValueError naming the key when these settings cannot apply to ``input_shape``."""
    if (crop_padding > 0 or flip) and len(input_shape) != 3:
        key, value = ("crop_padding", crop_padding) if crop_padding else ("flip", flip)
        raise ValueError(f"{key}={value!r}: needs images [height, width, channels], the data "
                         f"gives {list(input_shape)}")
    if crop_padding < 0:
        raise ValueError(f"crop_padding={crop_padding}: must be >= 0")
    for key, value in (("mean", mean), ("std", std)):
        if value is not None and len(value) not in (1, input_shape[-1]):
            raise ValueError(f"{key}={list(value)}: needs 1 or {input_shape[-1]} values")
    if std is not None and min(std) <= 0:
        raise ValueError(f"std={list(std)}: must be positive")
