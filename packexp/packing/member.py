"""One trial inside a pack: its own model, optimizer, batch size and step counter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from packexp.packing.data import Preprocessing, batch_indices
from packexp.packing.optimizers import make_optimizer
from packexp.search_space import Trial

ModelBuilder = Callable[[Sequence[int], int, Mapping[str, Any]], keras.Model]


@dataclass(eq=False)
class Member:
    """A trial's training state; ``step`` counts the batches it has trained on."""

    trial: Trial
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    batch_size: int
    train_size: int
    step: int = 0
    failed: bool = False
    train_loss: float | None = None
    preprocessing: Preprocessing = field(default_factory=Preprocessing)

    @classmethod
    def create(
        cls,
        trial: Trial,
        build_model: ModelBuilder,
        input_shape: Sequence[int],
        num_classes: int,
        train_size: int,
        preprocessing: Preprocessing | None = None,
    ) -> Member:
        """Builds the trial's model and optimizer with weights seeded by the trial alone."""
        batch_size = int(trial.hparams["batch_size"])
        if not 1 <= batch_size <= train_size:
            raise ValueError(
                f"batch_size={batch_size}: must be between 1 and the {train_size} training examples"
            )
        keras.utils.set_random_seed(trial.seed)
        model = build_model(input_shape, num_classes, trial.hparams)
        optimizer = make_optimizer(trial.hparams["optimizer"], trial.hparams["learning_rate"])
        optimizer.build(model.trainable_variables)
        return cls(trial, model, optimizer, batch_size, train_size,
                   preprocessing=preprocessing or Preprocessing())

    @property
    def trial_id(self) -> str:
        return self.trial.trial_id

    @property
    def steps_per_epoch(self) -> int:
        return self.train_size // self.batch_size

    def steps_for(self, epochs: float) -> int:
        """Total steps that ``epochs`` epochs amount to (at least one)."""
        return max(1, round(epochs * self.steps_per_epoch))

    def save(self, directory: str | Path) -> str:
        """Writes a checkpoint of weights, optimizer slots and step counter.

        Returns:
            The checkpoint path, for ``restore``.
        """
        step = tf.Variable(self.step, dtype=tf.int64)
        return self._checkpoint(step).write(str(Path(directory) / self.trial_id))

    def restore(self, path: str) -> Member:
        """Loads a checkpoint written by ``save`` of the same trial into this member."""
        step = tf.Variable(0, dtype=tf.int64)
        self._checkpoint(step).read(path).assert_consumed()
        self.step = int(step.numpy())
        return self

    def _checkpoint(self, step: tf.Variable) -> tf.train.Checkpoint:
        # Plain lists of the underlying variables: the structure is fixed by the trial's
        # model and optimizer, so any pack can restore it into a freshly built member.
        return tf.train.Checkpoint(
            weights=[v.value for v in self.model.weights],
            slots=[v.value for v in self.optimizer.variables],
            step=step,
        )

    def next_batches(self, steps: int) -> np.ndarray:
        return batch_indices(self.trial.seed, self.train_size, self.batch_size, self.step, steps)
