"""The pyfunc loader of a logged model: the user's rows checked and cast for the ``.keras`` file."""

# Copied into each logged model's code/ folder (mlflow_model.LOADER), so it imports nothing
# of packexp: a server with MLflow and Keras alone loads the model.

from __future__ import annotations

import os
from typing import Any

import numpy as np

MODEL_FILE = "model.keras"
# The key of the MLmodel's python_function model_config naming the feature columns.
COLUMNS = "feature_columns"


def _load_pyfunc(path: str, model_config: dict[str, Any] | None = None) -> KerasRows:
    """``mlflow.pyfunc.load_model``'s call: the model in ``path`` (the flavor's ``data``)."""
    import keras

    columns = (model_config or {}).get(COLUMNS)
    return KerasRows(keras.saving.load_model(os.path.join(path, MODEL_FILE)),
                     None if columns is None else tuple(str(c) for c in columns))


class KerasRows:
    """A Keras model's ``predict`` behind pyfunc's: arrays of any number type, a table matched
    to ``columns`` by name (in order where there are none), images of any number type."""

    def __init__(self, model: Any, columns: tuple[str, ...] | None = None) -> None:
        self.model, self.columns = model, columns
        [spec] = model.inputs
        self.shape = tuple(spec.shape[1:])
        self.dtype = np.dtype(str(spec.dtype))

    def predict(self, data: Any, params: dict[str, Any] | None = None) -> np.ndarray:
        """The model's outputs for ``data``'s rows, as the ``.keras`` file's ``predict``."""
        return np.asarray(self.model.predict(self.rows(data), verbose=0))

    def rows(self, data: Any) -> np.ndarray:
        """``data`` as the model's input, in its dtype; a refusal names what does not fit."""
        import pandas as pd

        if isinstance(data, dict):  # a served body's columns: {"inputs": {"a": [...], ...}}
            data = pd.DataFrame({k: list(np.asarray(v)) if np.ndim(v) > 1 else v
                                 for k, v in data.items()})
        x = self._table(data) if isinstance(data, pd.DataFrame) else np.asarray(data)
        if x.dtype.kind == "O":  # a served body's nested lists, mixed or ragged
            try:
                x = x.astype(self.dtype)
            except (TypeError, ValueError):
                raise refused(f"values that are not numbers, or rows of unequal length: "
                              f"{self.wanted()}") from None
        if x.dtype.kind not in "biuf":
            raise refused(f"values of type {x.dtype} are not numbers: {self.wanted()}")
        if x.ndim != len(self.shape) + 1 or any(want not in (None, got) for want, got
                                                 in zip(self.shape, x.shape[1:], strict=True)):
            raise refused(f"input of shape {list(x.shape)}: {self.wanted()}")
        if not len(x):
            raise refused(f"no rows: {self.wanted()}")
        return x.astype(self.dtype, copy=False)

    def wanted(self) -> str:
        """What the model takes, in a few words."""
        dims = ", ".join("?" if n is None else str(n) for n in self.shape)
        if self.columns is None:
            return f"the model takes [n, {dims}]"
        return (f"the model takes [n, {dims}], or a table of its columns by name "
                f"({_names(self.columns)})")

    def _table(self, frame: Any) -> np.ndarray:
        import pandas as pd

        if len(self.shape) > 1:  # images: one column of them
            if frame.shape[1] != 1:
                raise refused(f"a table of {frame.shape[1]} columns: {self.wanted()}, as an "
                              "array or one column of them")
            return np.asarray([np.asarray(v) for v in frame.iloc[:, 0]])
        names = [str(c) for c in frame.columns]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise refused(f"column {_names(twice)} given more than once")
        if self.columns is not None and not _unnamed(frame.columns):
            missing = [c for c in self.columns if c not in names]
            unknown = [c for c in names if c not in self.columns]
            if missing or unknown:
                said = [f"missing column {_names(missing)}" if missing else "",
                        f"unknown column {_names(unknown)}" if unknown else ""]
                raise refused(f"{'; '.join(s for s in said if s)}: the model takes the "
                              f"columns {_names(self.columns)}, in any order")
            frame = frame.set_axis(names, axis=1)[list(self.columns)]
        if text := [str(c) for c, t in frame.dtypes.items()
                    if not pd.api.types.is_numeric_dtype(t)]:
            raise refused(f"column {_names(text)} holds values that are not numbers")
        return frame.to_numpy(dtype=self.dtype, na_value=np.nan)


def refused(message: str) -> Exception:
    """An input the model does not take, as MLflow reports it (a served request's 400)."""
    from mlflow.exceptions import INVALID_PARAMETER_VALUE, MlflowException

    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def _unnamed(columns: Any) -> bool:
    """Column labels 0, 1, ...: a table made from an array, taken in order."""
    return list(columns) == list(range(len(columns)))


def _names(names: Any, most: int = 8) -> str:
    names = [repr(str(n)) for n in names]
    return ", ".join(names[:most] + ([f"... ({len(names)} in all)"] if len(names) > most else []))
