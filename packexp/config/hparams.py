"""Which of a trial's hyper-parameters are training's (the pack engine reads them) and which
are the model's (its builder reads them, and they shape a member)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packexp.config.preprocessing import KEYS as PREPROCESS_KEYS
from packexp.space.options import OPTIMIZERS

REQUIRED_HPARAMS = ("batch_size", "optimizer", "learning_rate")

# Hyper-parameters the pack engine consumes, with the optimizers' own arguments
# (``optimizer_args``). Every other one a search space lists belongs to the model: its builder
# reads it from ``hparams``, and it is part of a member's structure.
TRAINING_HPARAMS = (*REQUIRED_HPARAMS, *PREPROCESS_KEYS, "lr_schedule")


def model_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The model's own hyper-parameters among ``hparams``: not ``TRAINING_HPARAMS`` and not
    an argument of any optimizer (imports Keras)."""
    from packexp.packing.optimizers import optimizer_args

    optimizer = set().union(*map(optimizer_args, OPTIMIZERS))
    return {k: v for k, v in hparams.items()
            if k not in TRAINING_HPARAMS and k not in optimizer}
