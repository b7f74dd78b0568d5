"""What a search tunes for: one metric of each member's rung results, or several, and whether
higher or lower is better. Pure Python; one file per objective in ``conf/objective/``.

Everything that ranks reads the objective: Hyperband's halving, ASHA's promotions, a
population's exploits, TPE, the best, the summary and the results. Each ranks by ``score``,
the metric signed so that higher is better (a loss is negated), and reports ``value``, the
metric as measured. A member whose metric is missing or not a number (it diverged) ranks last.
Under several metrics halving and promotion rank by non-dominated front, then by crowding
distance (``order``), as MO-ASHA does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packexp.errors import one_of

#: The metrics each member's rung result holds, computed per member in the packed evaluation
#: program (validation) or in training (``train_loss``: the mean loss of the rung's last
#: chunk). A classification's: accuracy and cross-entropy; a regression's: mean squared error
#: (its loss), mean absolute error and R².
CLASSIFICATION = ("val_accuracy", "val_loss", "train_loss")
REGRESSION = ("val_mse", "val_mae", "val_r2", "val_loss", "train_loss")
REGRESSION_METRICS = REGRESSION[:3]  # the metrics that make a search a regression
#: ``params``: the member's parameter count (its model's weights, trainable or not);
#: ``flops``: its FLOPs per example (``models.flops``). Each depends on nothing but its own
#: configuration.
METRICS = (*CLASSIFICATION, *REGRESSION_METRICS, "params", "flops")
MODES = ("max", "min")
NAMES = {"val_accuracy": "validation accuracy", "val_loss": "validation loss",
         "train_loss": "training loss", "val_mse": "validation MSE",
         "val_mae": "validation MAE", "val_r2": "validation R²", "params": "parameters",
         "flops": "FLOPs per example"}


@dataclass(frozen=True)
class Objective:
    """``metric`` of each member's result (``METRICS``), ``max``imised or ``min``imised; or
    several, ``metrics``: ``[{name, mode}, ...]``, the first of which stands for the rest
    where one number is wanted (``metric`` and ``mode`` are then its; TPE's model, the
    best-so-far curve). A regression metric (``val_mse``, ``val_mae``, ``val_r2``) makes the
    search a regression: real-valued targets, one output, squared-error loss."""

    metric: str = "val_accuracy"
    mode: str = "max"
    metrics: Sequence[Mapping[str, str]] | None = field(default=None, compare=False)
    goals: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.metrics is None:
            goals = ((_metric("metric", self.metric), one_of("mode", self.mode, MODES)),)
        else:
            if isinstance(self.metrics, str | Mapping) or not self.metrics:
                raise ValueError(f"metrics={self.metrics!r}: must be a list of "
                                 "{name: <metric>, mode: max|min}")
            goals = tuple(_goal(i, m) for i, m in enumerate(self.metrics))
            if len({name for name, _ in goals}) < len(goals):
                raise ValueError(f"metrics: {[n for n, _ in goals]} names a metric twice")
            object.__setattr__(self, "metric", goals[0][0])
            object.__setattr__(self, "mode", goals[0][1])
        if any(n in REGRESSION_METRICS for n, _ in goals) and any(
                n == "val_accuracy" for n, _ in goals):
            raise ValueError("metrics: val_accuracy is a classification's, val_mse, val_mae and "
                             "val_r2 a regression's; a search is one or the other")
        object.__setattr__(self, "goals", goals)
        object.__setattr__(self, "metrics", None)

    @property
    def several(self) -> bool:
        """Whether it ranks by several metrics (a Pareto front)."""
        return len(self.goals) > 1

    def scores(self, result: Any) -> tuple[float, ...] | None:
        """Every goal's score (higher is better); None where any is missing."""
        out = []
        for name, mode in self.goals:
            value = _finite(measured(result, name))
            if value is None:
                return None
            out.append(value if mode == "max" else -value)
        return tuple(out)

    def rank_score(self, result: Any) -> float | tuple[float, ...] | None:
        """What the policies rank a result by (``order``): ``score``, or under several
        metrics every goal's."""
        return self.scores(result) if self.several else self.score(result)

    def value(self, result: Any) -> float | None:
        """The metric of ``result`` (a ``RungResult``, or its dict form); None where it is
        missing or not a number."""
        return _finite(measured(result, self.metric))

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

    def to_dict(self) -> dict[str, Any]:
        if self.several:
            return {"metrics": [{"name": n, "mode": m} for n, m in self.goals]}
        return {"metric": self.metric, "mode": self.mode}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Objective:
        return cls(metrics=record["metrics"]) if "metrics" in record else cls(**record)


def _goal(i: int, metric: Any) -> tuple[str, str]:
    if not isinstance(metric, Mapping) or set(metric) - {"name", "mode"} or "name" not in metric:
        raise ValueError(f"metrics[{i}]={metric!r}: must be {{name: <metric>, mode: max|min}}")
    return (_metric(f"metrics[{i}].name", metric["name"]),
            one_of(f"metrics[{i}].mode", metric.get("mode", "max"), MODES))


def _metric(key: str, name: Any) -> str:
    """A metric packexp computes, or ``val_<name>`` of one the model names (``Head``; the
    search checks that it does)."""
    if name in METRICS or (isinstance(name, str) and re.fullmatch(r"val_\w+", name)):
        return name
    raise ValueError(f"{key}={name!r}: must be {' or '.join(METRICS)}, or val_<name> of a "
                     "metric the model names (model.metrics)")


@dataclass(frozen=True)
class Head:
    """A model's own loss and Keras metrics, named by ``_target_`` in its config
    (``model.loss``, ``model.metrics``): plain nodes, instantiated where the members are.
    Each metric is measured per member on the validation data as ``val_<its name>``."""

    loss: Mapping[str, Any] | None = None
    metrics: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.loss is not None and not _node(self.loss):
            raise ValueError(f"loss={self.loss!r}: must be a node with _target_ (a Keras loss, "
                             "e.g. {_target_: keras.losses.Huber, delta: 1.0})")
        for i, node in enumerate(self.metrics):
            if not _node(node):
                raise ValueError(f"metrics[{i}]={node!r}: must be a node with _target_ (a Keras "
                                 "metric, e.g. {_target_: keras.metrics.AUC, name: auc})")
        names = self.names
        clash = sorted({n for n in names if n in METRICS} | {n for n in names
                                                           if names.count(n) > 1})
        if clash:
            raise ValueError(f"metrics: {clash[0]} is measured already; give the metric "
                             "another name (name: ...)")

    @property
    def custom(self) -> bool:
        return self.loss is not None or bool(self.metrics)

    @property
    def names(self) -> list[str]:
        """``val_<name>`` of each metric: its ``name``, else its class's in snake case."""
        return [f"val_{node.get('name') or _snake(str(node['_target_']).rsplit('.', 1)[-1])}"
                for node in self.metrics]


NO_HEAD = Head()


def _node(node: Any) -> bool:
    return isinstance(node, Mapping) and "_target_" in node


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def measured(result: Any, name: str) -> Any:
    """``name`` of ``result`` (a ``RungResult``, or its dict form as ``results.json`` holds
    it): its field, or one of the model's own metrics it holds."""
    if isinstance(result, Mapping):
        value, own = result.get(name), result.get("metrics")
    else:
        value, own = getattr(result, name, None), getattr(result, "metrics", None)
    return (own or {}).get(name) if value is None else value


def _finite(value: Any) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def order(scores: Sequence[float | tuple[float, ...] | None]) -> list[int]:
    """Positions of ``scores`` from best to worst (higher is better). Numbers rank by value;
    tuples (several goals) by non-dominated front, then, within a front, by crowding distance
    (the larger first: the front's ends, then its sparser parts), as MO-ASHA ranks. Missing
    scores (None or NaN) rank last; ties keep their order, so the ranking is deterministic."""
    valid = [i for i, s in enumerate(scores) if ranked(s)]
    valid_set = set(valid)
    rest = [i for i in range(len(scores)) if i not in valid_set]
    if not valid or not isinstance(scores[valid[0]], tuple):
        return sorted(valid, key=lambda i: (-scores[i], i)) + rest  # type: ignore[operator]
    out: list[int] = []
    for front in fronts([scores[i] for i in valid]):  # type: ignore[misc]
        distance = crowding([scores[valid[j]] for j in front])  # type: ignore[misc]
        out += [valid[j] for _, j in sorted(zip(distance, front, strict=True),
                                            key=lambda d: (-d[0], d[1]))]
    return out + rest


def ranked(score: float | tuple[float, ...] | None) -> bool:
    """Whether ``score`` ranks at all: present and a number in every goal (else it ranks
    last, a failed member's)."""
    if score is None:
        return False
    return not (any(math.isnan(s) for s in score) if isinstance(score, tuple)
                else math.isnan(score))


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every goal and better in one."""
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(
        x > y for x, y in zip(a, b, strict=True))


def fronts(points: Sequence[Sequence[float]]) -> list[list[int]]:
    """The points' non-dominated fronts, first the Pareto front; each in the points' order."""
    left, out = list(range(len(points))), []
    while left:
        front = [i for i in left if not any(dominates(points[j], points[i]) for j in left)]
        out.append(front)
        left = [i for i in left if i not in front]
    return out


def crowding(points: Sequence[Sequence[float]]) -> list[float]:
    """Each point's crowding distance within its front (NSGA-II): infinite at each goal's
    ends, else the sum over goals of its neighbours' gap, normalised by the goal's range."""
    n = len(points)
    distance = [0.0] * n
    if n <= 2:
        return [math.inf] * n
    for g in range(len(points[0])):
        by = sorted(range(n), key=lambda i: points[i][g])
        low, high = points[by[0]][g], points[by[-1]][g]
        distance[by[0]] = distance[by[-1]] = math.inf
        if high == low:
            continue
        for k in range(1, n - 1):
            distance[by[k]] += (points[by[k + 1]][g] - points[by[k - 1]][g]) / (high - low)
    return distance


#: The default: validation accuracy, higher is better (packexp's behaviour before objectives).
ACCURACY = Objective()
