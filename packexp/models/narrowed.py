"""A model builder whose models are narrow stand-ins (``surrogate.scale``), read without
importing TensorFlow (the width scaler itself is ``stand_in.py``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from packexp.surrogate import SCALE_KEY, Surrogate


class Narrowed:
    """A model builder whose models are stand-ins ``scale`` times narrower; a trial whose
    ``surrogate_scale`` is 1 (the transfer's) gets the builder's own model.

    Args:
        build: The builder (``models``' contract; a ``functools.partial`` of one).
        scale: The search's width divisor.
        readout_zero_init: Start the readout's kernel at zero.
    """

    def __init__(self, build: Callable[..., Any], scale: int,
                 readout_zero_init: bool = False) -> None:
        self.build, self.scale, self.readout_zero_init = build, scale, readout_zero_init

    @property
    def func(self) -> Callable[..., Any]:
        """The builder's own function, whose module says what it takes (``models``)."""
        return getattr(self.build, "func", self.build)

    def __call__(self, input_shape: Sequence[int], num_classes: int,
                 hparams: Mapping[str, Any]) -> Any:
        scale = int(hparams.get(SCALE_KEY, self.scale))
        own = {k: v for k, v in hparams.items() if k != SCALE_KEY}
        if scale == 1:
            return self.build(input_shape, num_classes, own)
        from packexp.models.stand_in import stand_in

        return stand_in(self.build, input_shape, num_classes, own, scale,
                        self.readout_zero_init)


def narrowed(build: Callable[..., Any], surrogate: Surrogate) -> Callable[..., Any]:
    """``build`` as a search over ``surrogate``'s stand-ins builds: itself when it is off."""
    return Narrowed(build, surrogate.scale, surrogate.readout_zero_init) if surrogate.on else build
