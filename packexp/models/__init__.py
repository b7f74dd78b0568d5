"""Model builders: ``build(input_shape, num_classes, hparams, **config) -> keras.Model``.

One module per model, named as its config file; a keras.applications model with no knob of
its own needs none: its config file names the class for ``keras_apps.build``. A builder
returns logits and reads the
model-level hyper-parameters (``activation``) from ``hparams``; training-level ones (batch
size, optimizer, learning rate) belong to the pack. A module whose model takes only images
sets ``NEEDS_IMAGES = True``, so a dataset with ``images: auto`` gives it images.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def needs_images(build: Callable[..., Any]) -> bool:
    """Whether ``build`` (or the ``functools.partial`` Hydra makes of it) takes only images.

    Reads ``NEEDS_IMAGES`` of the builder's module, so no TensorFlow is imported here.
    """
    func = getattr(build, "func", build)
    return bool(getattr(sys.modules.get(func.__module__), "NEEDS_IMAGES", False))
