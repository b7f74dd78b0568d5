"""Model builders: ``build(input_shape, num_classes, hparams, **settings) -> keras.Model``.

One module per model, named as its config file; a keras.applications model with no knob of
its own needs none: its config file names the class for ``keras_apps.build``. A user's model
is the same contract in the user's own package, named by a config file in the user's own
config directory (README, "Your own model").

A builder returns logits ``[batch, num_classes]`` of one input. ``hparams`` holds the trial's
every hyper-parameter: the training ones (``config.TRAINING_HPARAMS``: batch size, optimizer,
learning rate, preprocessing) belong to the pack, and the builder reads the rest (an
``activation``, a ``width``), falling back to its settings where a key is absent (the
profiles pass only ``activation``). Builds are seeded: the same seed must give the same
weights. A module whose model takes only images sets ``NEEDS_IMAGES = True``, so a dataset
with ``images: auto`` gives it images.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def runtime_hparams(build: Callable[..., Any]) -> tuple[str, ...]:
    """The hyper-parameters a model built by ``build`` takes at run time (its module's
    ``RUNTIME_HPARAMS``, such as mlp3's ``activation``): trials that differ only in them share
    a built model and its traced step. Read without importing TensorFlow."""
    func = getattr(build, "func", build)
    return tuple(getattr(sys.modules.get(func.__module__), "RUNTIME_HPARAMS", ()))


def needs_images(build: Callable[..., Any]) -> bool:
    """Whether ``build`` (or the ``functools.partial`` Hydra makes of it) takes only images.

    Reads ``NEEDS_IMAGES`` of the builder's module, so no TensorFlow is imported here.
    """
    func = getattr(build, "func", build)
    return bool(getattr(sys.modules.get(func.__module__), "NEEDS_IMAGES", False))
