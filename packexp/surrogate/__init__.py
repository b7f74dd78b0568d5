"""Narrow stand-ins (Hydro, after muP): a search over models with every hidden width divided
by ``scale``, parametrised so their best values are the full model's, whose best
configurations then train at full width. Pure Python: the settings here, the muP rules in
``rules.py``, the transfer policy in ``transfer.py``; the width scaler is
``packexp.models.stand_in``."""

from __future__ import annotations

from dataclasses import dataclass

from packexp.errors import positive_int
from packexp.records.transfer import PREFIX as FULL_PREFIX  # noqa: F401 (re-exported)
from packexp.records.transfer import SCALE_KEY


@dataclass(frozen=True)
class Surrogate:
    """How a search uses stand-ins (``conf/config.yaml``'s ``surrogate``).

    Attributes:
        scale: Each hidden width divided by this; 1 trains the model itself (off).
        transfer: The best configurations trained again at full width, packed together, for
            the search's top budget, as its last step; the search's best is theirs.
        readout_zero_init: Start the stand-ins' readout at zero (muP's suggestion) instead of
            its rescaled standard initialisation.
    """

    scale: int = 1
    transfer: int = 3
    readout_zero_init: bool = False

    def __post_init__(self) -> None:
        positive_int("surrogate.scale", self.scale)
        positive_int("surrogate.transfer", self.transfer)
        if not isinstance(self.readout_zero_init, bool):
            raise ValueError(f"surrogate.readout_zero_init={self.readout_zero_init!r}: "
                             "must be true or false")

    @property
    def on(self) -> bool:
        return self.scale > 1


OFF = Surrogate()


def full_width(hparams: dict) -> dict:
    """``hparams`` as the transfer trains them: at the model's own width."""
    return {**hparams, SCALE_KEY: 1}


def is_full(hparams, surrogate: Surrogate) -> bool:
    """Whether a trial of ``hparams`` trains the model at its own width."""
    return int(hparams.get(SCALE_KEY, surrogate.scale)) == 1
