"""Kept models for MLflow: a ``.keras`` file with its input example and shapes, made without
MLflow (the writer's ``mlflow_model`` logs it), and ``log_model_file`` for one kept later."""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packexp.events import Summary
from packexp.records.best import Best

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from packexp.records.search_result import SearchResult
    from packexp.tracking.base import Tracker

# At most this many rows, and about this many values, in a model's input example: a few rows
# show the columns; a few large images would make the served example megabytes of JSON.
EXAMPLE_ROWS, EXAMPLE_VALUES = 5, 20_000
# A model kept as weights only (packing.export): its file's suffix, and the parent run's
# folder of artifacts that holds it.
WEIGHTS_SUFFIX, WEIGHTS_FOLDER = ".weights.h5", "model_weights"
# The package each Keras backend runs on, for the served environment's requirements.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


@dataclass(frozen=True)
class KerasFile:
    """A whole model saved by Keras (``.keras``), to log as an MLflow Model of the Keras
    flavor (``mlflow_model.log_keras_file``).

    Attributes:
        path: The file.
        artifact_path: The model's name in its run: ``runs:/<run_id>/<artifact_path>``.
        example: A few rows the model takes, as a user gives them, float64: the model's
            input example, whose shape (after the rows) the signature's input has.
        columns: The feature columns' names for 2-D rows (the example is then a table, and
            the served example a ``dataframe_split`` with them); None: none known.
        outputs: The shape of one row of output, for the signature; None: not recorded.
        keras_version, keras_backend: What the file was saved with.
        requirements: The pip requirements of an environment that loads it.
        tags: Tags of the MLflow logged model.
    """

    path: str
    artifact_path: str
    example: np.ndarray
    columns: tuple[str, ...] | None = None
    outputs: tuple[int, ...] | None = None
    keras_version: str = ""
    keras_backend: str = "tensorflow"
    requirements: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


def keras_file(path: str | Path, example: Any, artifact_path: str = "model",
               columns: Sequence[str] | None = None, outputs: Sequence[int] | None = None,
               tags: Mapping[str, Any] | None = None) -> KerasFile:
    """``path`` as a ``KerasFile``: the versions and requirements of this environment's Keras.

    Args:
        path: A ``.keras`` file (a whole model, as ``model.save`` writes it).
        example: A few rows the model takes: an array, or a DataFrame whose column names
            become ``columns``.
        artifact_path: The model's name in its run.
        columns: The feature columns' names, for 2-D rows.
        outputs: The shape of one row of output.
        tags: Tags of the MLflow logged model.
    """
    path = Path(path)
    if path.suffix != ".keras" or not path.is_file():
        raise ValueError(f"{path}: not a whole-model .keras file")
    if columns is None and hasattr(example, "columns"):
        columns = [str(c) for c in example.columns]
    rows = np.asarray(example, dtype=np.float64)
    if rows.ndim < 2 or not len(rows):
        raise ValueError(f"input example of shape {rows.shape}: must be one or more rows")
    columns = tuple(str(c) for c in columns) if columns is not None else None
    if columns is not None and (rows.ndim != 2 or len(columns) != rows.shape[1]):
        raise ValueError(f"{len(columns)} column names for rows of shape {rows.shape[1:]}")
    backend = _backend()
    return KerasFile(str(path.resolve()), artifact_path, rows, columns,
                     None if outputs is None else tuple(int(n) for n in outputs),
                     _version("keras") or "", backend,
                     tuple(_pinned(p) for p in ("keras", BACKEND_PACKAGES.get(backend)) if p),
                     {k: str(v) for k, v in (tags or {}).items() if v is not None})


def log_best_model(tracker: Tracker, result: SearchResult, run_dir: Path, dataset: Any,
                   cfg: DictConfig | None = None) -> dict[str, Any] | None:
    """Logs the search ``result``'s best kept model on the tracker's run as ``model`` when it
    is a whole model (``.keras``); returns where (``results.json``'s ``mlflow_model``), None
    when nothing was logged (a tracker that keeps no run: ``tracking=none``).

    A model kept as weights only (Keras could not load it whole) is no MLflow Model, whose
    ``pyfunc`` would not load either: its ``.weights.h5`` is logged as a plain artifact
    (``model_weights/``), said in one line, and None returned."""
    best = result.best_kept()
    file = None if best is None else best.model
    if tracker.run_id is None or not file:
        return None
    if str(file).endswith(WEIGHTS_SUFFIX):
        tracker.on_summary(Summary(artifacts=[(run_dir / file, WEIGHTS_FOLDER)]))
        logging.getLogger(__name__).info(
            "MLflow: %s's model is kept as weights only, so no MLflow Model is logged; its "
            "weights are the run's artifact %s/%s", best.trial_id, WEIGHTS_FOLDER,
            Path(file).name)
        return None
    if not str(file).endswith(".keras"):
        return None
    example = example_rows(dataset)
    if example is None:
        return None
    columns = feature_columns(cfg, dataset) if cfg is not None else None
    model = keras_file(run_dir / file, example, "model", columns,
                       (int(dataset.num_classes),),
                       {"trial_id": best.trial_id, "file": file, "epochs": best.epochs,
                        "rung": result.kept.get(best.trial_id, {}).get("rung"),
                        # the best's every recorded metric and objective value; a front
                        # point's, each goal's
                        **({**best.metrics, best.metric: best.value} if isinstance(best, Best)
                           else dict(best.values))})
    return tracker.log_model(model) or None


def log_model_file(uri: str, run_id: str, keras_file_path: str | Path, artifact_path: str,
                   input_example: Any, register_as: str | None = None, *,
                   columns: Sequence[str] | None = None, outputs: Sequence[int] | None = None,
                   tags: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Logs a kept ``.keras`` file into an existing run as an MLflow Model of the Keras flavor
    (a refit model, say, beside the search's ``model``), from any process: an MLflow writer
    process does it, so this one never imports MLflow. Returns once it is logged.

    Args:
        uri: The tracking URI (``sqlite:///...``, ``http://...``).
        run_id: The run to log into; it may have ended.
        keras_file_path: The whole-model ``.keras`` file.
        artifact_path: The model's name in the run (``refit_model``).
        input_example: A few rows the model takes (an array, or a DataFrame of the feature
            columns), as a user gives them.
        register_as: A registered model's name: the model becomes its next version.
        columns: The feature columns' names, if ``input_example`` is an array of rows.
        outputs: The shape of one row of output, for the signature.
        tags: Tags of the MLflow logged model.

    Returns:
        ``uri`` (``runs:/<run_id>/<artifact_path>``), ``model_uri`` (``models:/<model_id>``)
        and, when registered, ``registered`` (``models:/<name>/<version>``).

    Raises:
        TrackingError: The store refused it, or the writer process could not start.
    """
    from packexp.tracking import writer_process
    from packexp.tracking.base import TrackingError
    from packexp.tracking.writer_process import CallFailed, WriterGone

    model = keras_file(keras_file_path, input_example, artifact_path, columns, outputs, tags)
    name = registered_name(register_as)
    try:
        writer = writer_process.claim(_warn)
    except OSError as e:
        raise TrackingError(f"cannot start the MLflow writer process: {e}") from None
    try:
        return writer.call("log_model_file", uri, run_id, model, name)
    except CallFailed as e:
        raise TrackingError(f"MLflow: could not log {model.path} into run {run_id} ({e})") \
            from None
    except WriterGone as e:
        raise TrackingError(f"MLflow: could not log {model.path} ({e})") from None
    finally:
        if writer.alive:
            writer_process.release(writer)


def registered_name(value: Any) -> str | None:
    """``tracking.register_as`` as MLflow takes it: a name, or None; a ``ValueError`` names
    the key otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise ValueError(f"register_as={value!r}: must be a registered model's name (a "
                         "non-empty string), or null")
    return str(value)


def example_rows(dataset: Any, rows: int = EXAMPLE_ROWS) -> np.ndarray | None:
    """A few validation rows as the user gives them (the dataset's ``inputs`` scaling
    undone; uint8 images as float32); None where the dataset yields none."""
    shape = tuple(dataset.input_shape)
    count = max(1, min(rows, EXAMPLE_VALUES // max(1, math.prod(shape))))
    x = getattr(dataset, "x_val", None)
    if x is None:  # streamed: its first block of validation rows
        try:
            blocks = dataset.val_blocks(count)
            x = next(iter(blocks))[0]
            blocks.close()
        except (AttributeError, StopIteration, OSError, ValueError):
            return None
    x = np.asarray(x[:count])
    scaling = getattr(dataset, "inputs", None)
    return np.asarray(scaling.inverse(x) if scaling is not None else x, np.float32)


def feature_columns(cfg: DictConfig, dataset: Any) -> tuple[str, ...] | None:
    """The feature columns' names, for a table's rows (``dataset=table``: its header but the
    target, or ``dataset.features``); None for other data, or where the file cannot say."""
    names = getattr(dataset, "features", None)  # a streamed table keeps them
    if names:
        return tuple(str(n) for n in names)
    node = cfg.get("dataset")
    if node is None or len(dataset.input_shape) != 1 or not node.get("path") \
            or not str(node.get("_target_", "")).startswith("packexp.data.table."):
        return None
    if node.get("features"):
        names = [str(n) for n in node.features]
    else:
        names = [c for c in _header(Path(os.path.expanduser(str(node.path))))
                 if c != str(node.get("target"))]
    return tuple(names) if len(names) == dataset.input_shape[0] else None


def _warn(what: str, why: str) -> None:
    logging.getLogger(__name__).warning("MLflow: could not %s (%s)", what, why)


def _header(path: Path) -> list[str]:
    try:
        if path.suffix.lower() == ".csv":
            import pandas as pd

            return [str(c) for c in pd.read_csv(path, nrows=0).columns]
        import pyarrow.parquet as pq

        return [str(c) for c in pq.read_schema(path).names]
    except (OSError, ValueError, ImportError):
        return []


def _backend() -> str:
    keras = sys.modules.get("keras")  # loaded wherever the file was made; never loaded here
    if keras is not None:
        return str(keras.config.backend())
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pinned(package: str) -> str:
    version = _version(package)
    return f"{package}=={version}" if version else package
