"""What a run records of its data and its source: each split's digest, dtypes and shapes
(made without MLflow, in the tracker's process) and, in the writer, the MLflow run inputs
and source tags made from them."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

# What the Source column shows for every run packexp makes, whatever started the process.
SOURCE = {"mlflow.source.name": "python -m packexp", "mlflow.source.type": "LOCAL"}


class Split(NamedTuple):
    """One split of a dataset as MLflow records it: a digest of its content, not the content."""

    context: str
    digest: str
    features: tuple[str, tuple[int, ...]]  # dtype, shape
    targets: tuple[str, tuple[int, ...]]


def dataset_splits(dataset: Any) -> list[Split]:
    """The dataset's training and validation splits, each with a digest of its whole content
    (MLflow's own hashes a sample of rows), dtypes and shapes; no MLflow needed."""
    if getattr(dataset, "streams", False):  # its files: their paths and labels, not pixels
        return [_file_split(context, source, y, dataset.input_shape, dataset.dtype)
                for context, source, y in (("training", dataset.train, dataset.y_train),
                                           ("validation", dataset.val, dataset.y_val))]
    splits = []
    for context, x, y in (("training", dataset.x_train, dataset.y_train),
                          ("validation", dataset.x_val, dataset.y_val)):
        digest = hashlib.sha256()
        for array in (x, y):
            digest.update(str((array.dtype, array.shape)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        splits.append(Split(context, digest.hexdigest()[:8], (x.dtype.str, x.shape),
                            (y.dtype.str, y.shape)))
    return splits


def _file_split(context: str, source: Any, y: np.ndarray, shape: tuple[int, ...],
                dtype: str) -> Split:
    """A streamed split: a digest of where its examples are and their labels; dtypes and
    shapes as decoded."""
    digest = hashlib.sha256(source.fingerprint())
    digest.update(np.ascontiguousarray(y).tobytes())
    return Split(context, digest.hexdigest()[:8], (np.dtype(dtype).str, (len(source), *shape)),
                 (y.dtype.str, y.shape))


def split_inputs(name: str, splits: Sequence[Split], source: str | None = None) -> list[Any]:
    """The splits as MLflow run inputs, each with the dataset's name, its digest and a profile
    with the shapes; the context tag says which split it is.

    Args:
        name: The dataset's name.
        splits: From ``dataset_splits``.
        source: The file or folder the data was read from; None for data made in code.
    """
    import mlflow.data
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.entities import DatasetInput, InputTag

    where = source if source is not None else CodeDatasetSource(tags=source_tags())
    inputs = []
    for split in splits:
        # With the digest given, MLflow reads only the arrays' dtypes and shapes: arrays of
        # that dtype and shape, all one element, stand in for the content.
        x, y = (np.broadcast_to(np.zeros((), dtype), shape)
                for dtype, shape in (split.features, split.targets))
        with warnings.catch_warnings():
            # MLflow registers its local artifact source twice ("" and "file" schemes) and
            # warns that a path matches both; either is the same class.
            warnings.filterwarnings("ignore", "The specified dataset source can be interpreted")
            numpy_dataset = mlflow.data.from_numpy(x, targets=y, name=name, digest=split.digest,
                                                   source=where)
        inputs.append(DatasetInput(numpy_dataset._to_mlflow_entity(),
                                   tags=[InputTag("mlflow.data.context", split.context)]))
    return inputs


def source_tags() -> dict[str, str]:
    """The runs' source: ``SOURCE``, with the user and git commit MLflow finds, if any."""
    from mlflow.tracking.context import registry

    try:
        found = registry.resolve_tags()
    except Exception:  # a context provider that fails must not stop the run
        found = {}
    return {**found, **SOURCE}
