"""The search's best model as an MLflow Model, logged by the MLflow writer (a process of its
own): loaded back through pyfunc from the run, registered as version 1 of its name, and a
model kept later joining the ended run as the next version. The checks without a writer are
tests/engine/test_mlflow_model.py's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits

from packexp.tracking import log_model_file

NAME = "packexp-digits"


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data, digits.target


def keras_predictions(path: Path, rows: np.ndarray) -> np.ndarray:
    import keras

    return keras.saving.load_model(path).predict(np.asarray(rows, np.float32), verbose=0)


# A search that logs and registers its best model (in this process; the writer in its own).


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    import packexp

    root = tmp_path_factory.mktemp("model")
    result = packexp.tune(data=digits_rows(), experiment="quick", strategy="knn",
                          tracking="mlflow", run_dir=root / "run",
                          overrides=[f"tracking.store_dir={root / 'store'}",
                                     f"tracking.register_as={NAME}"])
    return result, f"sqlite:///{root / 'store' / 'mlflow.db'}"


@pytest.fixture
def store(tuned, monkeypatch):
    """The search's store as MLflow's default, for ``runs:/`` and ``models:/`` URIs."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tuned[1])
    return tuned[1]


@pytest.mark.tf
@pytest.mark.process
@pytest.mark.search
def test_the_best_model_loads_from_the_run_and_predicts_as_its_file(tuned, store):
    import mlflow.pyfunc

    result, _ = tuned
    logged = result.results["mlflow_model"]
    assert logged == {"uri": f"runs:/{result.mlflow_run_id}/model", "registered_as": NAME}
    rows = digits_rows()[0][:16]  # the user's raw pixels, 0 to 16, float64 as NumPy gives
    model = mlflow.pyfunc.load_model(logged["uri"])
    np.testing.assert_array_equal(np.asarray(model.predict(pd.DataFrame(rows))),
                                  keras_predictions(result.run_dir / result.best["model"], rows))
    schema = model.metadata.signature
    assert [(s.type, s.shape) for s in schema.inputs.inputs] == [(np.float64, (-1, 64))]
    assert [(s.type, s.shape) for s in schema.outputs.inputs] == [(np.float32, (-1, 10))]
    assert model.metadata.flavors["keras"]["keras_backend"] == "tensorflow"


@pytest.mark.tf
@pytest.mark.process
@pytest.mark.search
def test_it_is_version_1_of_the_name_made_from_the_search_s_run(tuned, store):
    import mlflow.artifacts
    import mlflow.pyfunc
    from mlflow import MlflowClient

    result, _ = tuned
    client = MlflowClient(store)
    version = client.get_model_version(NAME, "1")
    assert version.run_id == result.mlflow_run_id and version.status == "READY"
    assert version.source.startswith("models:/m-")  # as mlflow.register_model records it
    logged = client.get_logged_model(version.source.removeprefix("models:/"))
    assert logged.source_run_id == result.mlflow_run_id and logged.name == "model"
    assert logged.tags["trial_id"] == result.best["trial_id"]
    assert logged.tags["file"] == result.best["model"]
    example = json.loads(Path(mlflow.artifacts.download_artifacts(
        f"models:/{NAME}/1/serving_input_example.json")).read_text())
    rows = np.asarray(example["inputs"], np.float64)
    np.testing.assert_array_equal(
        np.asarray(mlflow.pyfunc.load_model(f"models:/{NAME}/1").predict(rows)),
        keras_predictions(result.run_dir / result.best["model"], rows))
    assert rows.shape == (5, 64)
    np.testing.assert_allclose(rows, np.clip(np.round(rows), 0, 16), atol=1e-4)  # raw pixels


@pytest.mark.tf
@pytest.mark.process
@pytest.mark.search
def test_a_model_kept_later_joins_the_ended_run_and_the_next_version(tuned, store):
    import mlflow.pyfunc

    result, uri = tuned
    file = result.run_dir / result.best["model"]
    rows = pd.DataFrame(digits_rows()[0][:4],
                        columns=[f"px{i}" for i in range(64)])
    logged = log_model_file(uri, result.mlflow_run_id, file, "refit_model", rows,
                            register_as=NAME, outputs=(10,), tags={"refit": "true"})
    assert logged["uri"] == f"runs:/{result.mlflow_run_id}/refit_model"
    assert logged["registered"] == f"models:/{NAME}/2"
    refit = mlflow.pyfunc.load_model(logged["uri"])
    assert refit.metadata.get_input_schema().inputs[0].shape == (-1, 64)
    np.testing.assert_array_equal(np.asarray(refit.predict(rows)),
                                  keras_predictions(file, rows.values))
    first = mlflow.pyfunc.load_model(f"runs:/{result.mlflow_run_id}/model")
    assert first.metadata.model_id != refit.metadata.model_id
