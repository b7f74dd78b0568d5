"""What a search tunes for: one metric of each member's rung results, and whether higher or
lower is better. Pure Python; one file per objective in ``conf/objective/``.

Everything that ranks reads the objective: Hyperband's halving, ASHA's promotions, a
population's exploits, TPE, the best, the summary and the results. Each ranks by ``score``,
the metric signed so that higher is better (a loss is negated), and reports ``value``, the
metric as measured. A member whose metric is missing or not a number (it diverged) ranks last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from packexp.checks import one_of

#: The metrics each member's rung result holds, computed per member in the packed evaluation
#: program (validation) or in training (``train_loss``: the mean loss of the rung's last
#: chunk). A classification's: accuracy and cross-entropy; a regression's: mean squared error
#: (its loss), mean absolute error and R².
CLASSIFICATION = ("val_accuracy", "val_loss", "train_loss")
REGRESSION = ("val_mse", "val_mae", "val_r2", "val_loss", "train_loss")
REGRESSION_METRICS = REGRESSION[:3]  # the metrics that make a search a regression
METRICS = (*CLASSIFICATION, *REGRESSION_METRICS)
MODES = ("max", "min")
NAMES = {"val_accuracy": "validation accuracy", "val_loss": "validation loss",
         "train_loss": "training loss", "val_mse": "validation MSE",
         "val_mae": "validation MAE", "val_r2": "validation R²"}


@dataclass(frozen=True)
class Objective:
    """``metric`` of each member's result (``METRICS``), ``max``imised or ``min``imised. A
    regression metric (``val_mse``, ``val_mae``, ``val_r2``) makes the search a regression:
    real-valued targets, one output, squared-error loss."""

    metric: str = "val_accuracy"
    mode: str = "max"

    def __post_init__(self) -> None:
        one_of("metric", self.metric, METRICS)
        one_of("mode", self.mode, MODES)

    def value(self, result: Any) -> float | None:
        """The metric of ``result`` (a ``RungResult`` or anything with the attribute); None
        where it is missing or not a number."""
        value = getattr(result, self.metric, None)
        if value is None or not math.isfinite(value):
            return None
        return float(value)

    def score(self, result: Any) -> float | None:
        """``value`` signed so that higher is better; None ranks last."""
        return self.signed(self.value(result))

    def signed(self, value: float | None) -> float | None:
        """A value as a score, or a score as its value (the sign is its own inverse)."""
        if value is None:
            return None
        return value if self.mode == "max" else -value

    @property
    def regression(self) -> bool:
        """Whether the search is a regression (its metric is one only a regression has)."""
        return self.metric in REGRESSION_METRICS

    @property
    def name(self) -> str:
        """The metric in words: ``validation loss``."""
        return NAMES[self.metric]

    @property
    def label(self) -> str:
        """How the plots title it: ``validation accuracy``, ``validation loss (lower is
        better)``; the mode is said where it is not the metric's usual one."""
        usual = "max" if self.metric in ("val_accuracy", "val_r2") else "min"
        return self.name if self.mode == usual else (
            f"{self.name} ({'higher' if self.mode == 'max' else 'lower'} is better)")

    def to_dict(self) -> dict[str, str]:
        return {"metric": self.metric, "mode": self.mode}


#: The default: validation accuracy, higher is better (packexp's behaviour before objectives).
ACCURACY = Objective()
