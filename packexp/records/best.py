"""The best trial and the Pareto front, typed and frozen, that read as their JSON too."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


class _AsDict(Mapping):
    """A record that also reads as its JSON form (``record["hparams"]``, ``dict(record)``),
    as ``results.json``'s entries read before they were typed."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        """Its JSON form, as a notebook showed ``result.best`` before it was typed."""
        return repr(self.to_dict())


@dataclass(frozen=True, eq=False, repr=False)  # equal and shown as their JSON, as before
class Best(_AsDict):
    """The trial and rung best by the search's objective, and the values it trained with; in
    a population, also the schedule (``schedulers.base.schedule``) that made its weights.
    ``value``: its objective's ``metric`` there (Optuna's ``best_value``); ``model``: its kept
    model's file, where its weights were kept; ``metrics``: every metric the rung recorded,
    by name (``RungResult.recorded``: ``val_loss``, ``train_loss``, a regression's
    ``val_mse``, ``val_mae`` and ``val_r2``, each goal's). ``results.json``'s ``best`` is
    ``to_dict()``, the metrics among its keys (``best["val_r2"]``)."""

    trial_id: str
    hparams: Mapping[str, Any]
    val_accuracy: float | None
    epochs: float  # whole epochs as an int: 3, not 3.0 (R=10 has 10/9)
    schedule: Sequence[Mapping[str, Any]] | None = None
    metric: str = "val_accuracy"
    value: float | None = None
    model: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    OWN: ClassVar[tuple[str, ...]] = ("trial_id", "hparams", "val_accuracy", "epochs",
                                      "schedule", "metric", "value", "model")

    def __post_init__(self) -> None:
        if self.value is None and self.metric == "val_accuracy":
            object.__setattr__(self, "value", self.val_accuracy)

    def to_dict(self) -> dict[str, Any]:
        out = {"trial_id": self.trial_id, "hparams": dict(self.hparams),
               "val_accuracy": self.val_accuracy,
               **{k: v for k, v in self.metrics.items() if k not in self.OWN},
               "epochs": self.epochs, "metric": self.metric, "value": self.value}
        if self.schedule is not None:
            out["schedule"] = [dict(s) for s in self.schedule]
        if self.model is not None:
            out["model"] = self.model
        return out

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Best:
        """``to_dict``'s form read back; an older run's best has no ``metric`` or ``value``,
        and no metrics but ``val_accuracy``."""
        metrics = {k: v for k, v in record.items() if k not in cls.OWN}
        if record.get("val_accuracy") is not None:
            metrics = {"val_accuracy": record["val_accuracy"], **metrics}
        return cls(record["trial_id"], dict(record["hparams"]), record.get("val_accuracy"),
                   record["epochs"], record.get("schedule"),
                   record.get("metric", "val_accuracy"), record.get("value"),
                   record.get("model"), metrics)

    def __hash__(self) -> int:
        return hash((self.trial_id, self.epochs, self.metric, self.value))


@dataclass(frozen=True, eq=False, repr=False)
class FrontPoint(_AsDict):
    """A trial on the Pareto front (several objectives), at its last scored rung: each goal's
    value (``values``) and, where its weights were kept, its model's file. Its JSON form is an
    entry of ``results.json``'s ``pareto_front``: ``trial_id``, ``hparams``, ``epochs``, each
    goal's value by name, ``model``."""

    trial_id: str
    hparams: Mapping[str, Any]
    epochs: float
    values: Mapping[str, float | None]
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"trial_id": self.trial_id, "hparams": dict(self.hparams),
               "epochs": self.epochs, **self.values}
        if self.model is not None:
            out["model"] = self.model
        return out

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> FrontPoint:
        own = ("trial_id", "hparams", "epochs", "model")
        return cls(record["trial_id"], dict(record["hparams"]), record["epochs"],
                   {k: v for k, v in record.items() if k not in own}, record.get("model"))

    def __hash__(self) -> int:
        return hash((self.trial_id, self.epochs))
