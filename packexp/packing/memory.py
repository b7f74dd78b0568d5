"""Each member's memory cost: an analytic estimate, checked once by a measured probe."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Mapping

import keras

from packexp.space import Trial
from packexp.space.options import OPTIMIZERS

log = logging.getLogger(__name__)

BYTES = 4  # float32


def parameter_elements(model: keras.Model) -> tuple[int, int]:
    """(trainable, non-trainable) parameter counts."""
    def count(ws) -> int:
        return sum(math.prod(w.shape) for w in ws)

    return count(model.trainable_weights), count(model.non_trainable_weights)


def activation_elements(model: keras.Model) -> int:
    """Elements of every layer output for one example, through nested models."""
    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            total += activation_elements(layer)
            continue
        try:
            outputs = keras.tree.flatten(layer.output)
        except (AttributeError, ValueError):
            continue
        total += sum(math.prod(d for d in o.shape[1:] if d is not None) for o in outputs)
    return total


def estimate_bytes(model: keras.Model, optimizer: str, batch_size: int) -> int:
    """Weights, gradients, optimizer slots, and activations kept for the backward pass."""
    return _estimate(*parameter_elements(model), activation_elements(model), optimizer,
                     batch_size)


def _estimate(trainable: int, frozen: int, acts: int, optimizer: str, batch_size: int) -> int:
    # Optimizer slots are parameter copies (an unknown optimizer counts Adam's two);
    # activations count twice: the forward value and its gradient.
    slots = len(OPTIMIZERS[optimizer].slots) if optimizer in OPTIMIZERS else 2
    params = trainable * (2 + slots) + frozen
    return BYTES * (params + 2 * batch_size * acts)


class MemoryModel:
    """Member costs in bytes for the strategies.

    The estimate is checked by a probe the first time an architecture meets a batch size:
    the member trains a few steps alone and its peak memory is read (TensorFlow's allocator
    peak on a GPU, the process's peak RSS growth on a CPU). A probe builds and traces a pack
    of its own (8 s for MobileNetV2 on a 2-core CPU), so the architecture is probed once, at
    the first batch size where a probe could matter; where it saw more than the estimate,
    every cost is scaled up by the same factor (an underestimate left is caught by the
    out-of-memory split).

    Args:
        build_model: Builds a trial's model (the runner's model builder, bound to the data).
        probe: Runs a measured probe; a callable ``(trial) -> peak bytes`` or None.
        worth_probing: Given an estimate in bytes, whether a probe could change a packing
            decision; None probes every batch size.
        known: Probes measured before (``probes`` of an earlier model of this run, read back
            on resume): they are not run again.
        on_probe: Called with ``probes`` after each new probe, to keep them.
        architecture: A trial's architecture (its model hyper-parameters, such as a width):
            each is built once for its estimate. None: every trial has one architecture.
    """

    def __init__(self, build_model: Callable[[Trial], keras.Model],
                 probe: Callable[[Trial], int] | None = None,
                 worth_probing: Callable[[int], bool] | None = None,
                 known: Mapping[int, tuple[int, int]] | None = None,
                 on_probe: Callable[[dict[int, tuple[int, int]]], None] | None = None,
                 architecture: Callable[[Trial], Hashable] | None = None) -> None:
        self._build = build_model
        self._architecture = architecture or (lambda trial: None)
        self._probe = probe
        self._worth_probing = worth_probing
        self._on_probe = on_probe
        # Per architecture: trainable and frozen parameters, activations.
        self._shapes: dict[Hashable, tuple[int, int, int]] = {}
        self.probes: dict[int, tuple[int, int]] = dict(known or {})  # batch -> (est, measured)
        self._scale: float | None = next((max(1.0, m / e) for e, m in self.probes.values()),
                                         None)
        self._not_worth: set[int] = set()  # batch sizes where no probe could change a plan

    def estimate(self, trial: Trial) -> int:
        key = self._architecture(trial)
        if key not in self._shapes:
            model = self._build(trial)
            self._shapes[key] = (*parameter_elements(model), activation_elements(model))
        return _estimate(*self._shapes[key], trial.optimizer, trial.batch_size)

    def cost(self, trial: Trial) -> float:
        batch = trial.batch_size
        if self._scale is None and self._probe is not None and batch not in self._not_worth:
            estimate = self.estimate(trial)
            if self._worth_probing is None or self._worth_probing(estimate):
                measured = int(self._probe(trial))
                self.probes[batch] = (estimate, measured)
                self._scale = max(1.0, measured / estimate)
                if self._on_probe is not None:
                    self._on_probe(self.probes)
                log.info("memory probe, batch %d: estimate %.1f MB, measured %.1f MB",
                         batch, estimate / 2**20, measured / 2**20)
            else:
                self._not_worth.add(batch)
        return self.estimate(trial) * (self._scale or 1.0)
