"""A kept ``.keras`` file logged as an MLflow Model, registered: the writer's, without Keras."""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from packexp.tracking.models import KerasFile

log = logging.getLogger(__name__)

FLAVOR, DATA, MODEL_FILE, MODULE_FILE = "keras", "data", "model.keras", "keras_module.txt"
# The pyfunc loader, copied into the model's code/ folder under a name no package has.
LOADER, CODE = "packexp_keras_pyfunc", "code"


def log_keras_file(client: Any, run_id: str, model: KerasFile, register_as: str | None = None,
                   experiment_id: str | None = None) -> dict[str, str]:
    """Logs ``model`` as an MLflow logged model named ``model.artifact_path`` of run
    ``run_id`` (so ``runs:/<run_id>/<artifact_path>`` loads it), as ``mlflow.keras.log_model``
    does; with ``register_as``, registers it as that model's next version.

    Returns:
        ``uri``, ``model_uri`` and, when registered, ``registered`` (``models:/NAME/V``).
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    if experiment_id is None:
        experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(experiment_id, name=model.artifact_path,
                                        source_run_id=run_id, tags=dict(model.tags))
    try:
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
        with tempfile.TemporaryDirectory(prefix="packexp-model-") as tmp:
            path = Path(tmp, "model")
            save_keras_file(model, path, Model(artifact_path=logged.artifact_location,
                                               model_uuid=logged.model_id, run_id=run_id,
                                               model_id=logged.model_id))
            client.log_model_artifacts(logged.model_id, str(path))
    except BaseException:
        with contextlib.suppress(Exception):
            client.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        raise
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    info = {"uri": f"runs:/{run_id}/{model.artifact_path}",
            "model_uri": f"models:/{logged.model_id}"}
    if register_as:
        info["registered"] = register(client, register_as, logged, run_id)
    log.info("MLflow: logged %s as %s%s", Path(model.path).name, info["uri"],
             f", registered as {info['registered']}" if "registered" in info else "")
    return info


def register(client: Any, name: str, logged: Any, run_id: str) -> str:
    """Registers a logged model as ``name``'s next version (the registered model made if
    missing), as ``mlflow.register_model("models:/<model_id>", name)`` does; returns
    ``models:/<name>/<version>``."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    try:
        client.create_registered_model(name)
    except MlflowException as e:
        if e.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    # A source of models:/<model_id> is how a sqlite registry, which keeps no model_id, links
    # the version to its logged model; it looks the model up in MLflow's default store.
    with _use_tracking_uri(client.tracking_uri):
        version = client.create_model_version(name, source=f"models:/{logged.model_id}",
                                              run_id=run_id, model_id=logged.model_id)
    return f"models:/{name}/{version.version}"


def save_keras_file(model: KerasFile, path: Path, mlflow_model: Any) -> None:
    """Writes the MLflow Model folder ``mlflow.keras.save_model`` writes, the saved file
    copied where it would call ``model.save``: ``mlflow.keras`` imports Keras, and with it
    TensorFlow, which costs this process seconds for a file that is already saved.

    Unlike it, pyfunc loads the model with ``keras_pyfunc`` (in ``code/``), which takes the
    user's rows (any number type; a table by its column names) where ``mlflow.keras``'s takes
    the signature's one dtype and ignores names; and the folder is made before the input
    example is written into it: its ``log_model`` with an ``input_example`` fails
    (``FileNotFoundError: .../input_example.json``) on MLflow 3.17 because it writes the
    example into a folder it has not made yet.
    """
    import yaml
    from mlflow import pyfunc
    from mlflow.models.model import MLMODEL_FILE_NAME
    from mlflow.models.utils import _save_example
    from mlflow.utils.environment import (
        _CONDA_ENV_FILE_NAME,
        _PYTHON_ENV_FILE_NAME,
        _REQUIREMENTS_FILE_NAME,
        _generate_mlflow_version_pinning,
        _mlflow_conda_env,
        _PythonEnv,
    )
    from mlflow.utils.file_utils import get_total_file_size

    from packexp.tracking import keras_pyfunc

    (path / DATA).mkdir(parents=True)
    mlflow_model.signature = signature(model)
    _save_example(mlflow_model, input_example(model), str(path))
    shutil.copyfile(model.path, path / DATA / MODEL_FILE)
    (path / DATA / MODULE_FILE).write_text("keras")
    (path / CODE).mkdir()
    shutil.copyfile(Path(keras_pyfunc.__file__), path / CODE / f"{LOADER}.py")
    mlflow_model.add_flavor(FLAVOR, data=DATA, keras_version=model.keras_version,
                            keras_backend=model.keras_backend, save_exported_model=False)
    pyfunc.add_to_model(mlflow_model, loader_module=LOADER, data=DATA, code=CODE,
                        conda_env=_CONDA_ENV_FILE_NAME, python_env=_PYTHON_ENV_FILE_NAME,
                        model_config=None if model.columns is None else {
                            keras_pyfunc.COLUMNS: list(model.columns)})
    if size := get_total_file_size(str(path)):
        mlflow_model.model_size_bytes = size
    mlflow_model.save(str(path / MLMODEL_FILE_NAME))
    # Given, not inferred: inference loads the model in a subprocess (TensorFlow again); and
    # not checked against this environment, whose versions they are (the check reads every
    # installed package's metadata: a second of CPU).
    requirements = [_generate_mlflow_version_pinning(), *model.requirements]
    with open(path / _CONDA_ENV_FILE_NAME, "w") as f:
        yaml.safe_dump(_mlflow_conda_env(additional_pip_deps=requirements, install_mlflow=False),
                       stream=f, default_flow_style=False)
    (path / _REQUIREMENTS_FILE_NAME).write_text("\n".join(requirements))
    _PythonEnv.current().to_yaml(str(path / _PYTHON_ENV_FILE_NAME))


def signature(model: KerasFile) -> Any:
    """One float32 tensor out, when its shape is known; no input schema. MLflow enforces an
    input schema before the model sees the rows: a tensor's refuses every dtype but its own
    (float32 and int64 arrays, uint8 images), named columns refuse arrays, unnamed ones a
    missing column without naming it. The model's own ``predict`` checks and casts instead,
    and the input example (with the feature columns' names) says what goes in."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    if model.outputs is None:
        return None
    return ModelSignature(outputs=Schema([TensorSpec(np.dtype(np.float32),
                                                     (-1, *model.outputs))]))


def input_example(model: KerasFile) -> Any:
    """The example rows: a table of the feature columns when their names are known (served
    as a ``dataframe_split``), else the array (served as ``inputs``)."""
    if model.columns is None:
        return model.example
    import pandas as pd

    return pd.DataFrame(model.example, columns=list(model.columns))
