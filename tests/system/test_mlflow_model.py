"""The search's best model as an MLflow Model, logged by the MLflow writer (a process of its
own): loaded back through pyfunc from the run, registered as version 1 of its name, a model
kept later joining the ended run as the next version, and a wine-like CSV search's model
served by ``mlflow models serve``, answering every body form as the run's file. The checks
without a writer or a server are tests/engine/test_mlflow_model.py's."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from sklearn.datasets import load_digits, load_wine

from packexp.testing.command import packexp as run_cli
from packexp.testing.processes import free_port
from packexp.tracking import log_model_file
from tests.system.test_mlflow_server import group_members, stop_group

NAME = "packexp-digits"


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data, digits.target


def keras_predictions(path: Path, rows: np.ndarray) -> np.ndarray:
    import keras

    return keras.saving.load_model(path).predict(np.asarray(rows), verbose=0)


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
    for dtype in ("float32", "int64"):  # as the file takes them, cast by the model itself
        np.testing.assert_array_equal(
            model.predict(rows.astype(dtype)),
            keras_predictions(result.run_dir / result.best["model"], rows.astype(dtype)))
    schema = model.metadata.signature
    assert schema.inputs is None  # the model's predict checks the rows (mlflow_model.signature)
    assert [(s.type, s.shape) for s in schema.outputs.inputs] == [(np.float32, (-1, 10))]
    assert model.metadata.flavors["keras"]["keras_backend"] == "tensorflow"
    assert model.metadata.flavors["python_function"]["loader_module"] == "packexp_keras_pyfunc"


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
    assert refit.metadata.flavors["python_function"]["config"] == {
        "feature_columns": list(rows.columns)}
    np.testing.assert_array_equal(np.asarray(refit.predict(rows[rows.columns[::-1]])),
                                  keras_predictions(file, rows.values))
    first = mlflow.pyfunc.load_model(f"runs:/{result.mlflow_run_id}/model")
    assert first.metadata.model_id != refit.metadata.model_id


# A wine-like CSV's search on the command line, its registered model served on a loopback port.


@pytest.mark.tf
@pytest.mark.process
@pytest.mark.search
def test_a_csv_search_s_served_model_answers_every_body_form_as_the_run_s_file(tmp_path):
    wine = load_wine(as_frame=True)
    wine.data.assign(cultivar=wine.target).to_csv(tmp_path / "wine.csv", index=False)
    store = tmp_path / "store"
    out = run_cli("dataset=table", f"dataset.path={tmp_path / 'wine.csv'}",
                  "dataset.target=cultivar", "experiment=quick", "strategy=knn",
                  "tracking=mlflow", f"tracking.store_dir={store}",
                  "tracking.register_as=wine-csv", f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "registered as models:/wine-csv/1" in out.stdout + out.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    [example] = (store / "mlartifacts").rglob("serving_input_example.json")
    example = json.loads(example.read_text())  # the CSV's feature columns, by name
    columns = list(wine.data.columns)
    assert example["dataframe_split"]["columns"] == columns
    rows = wine.data.iloc[::12]  # every cultivar
    backwards = rows[columns[::-1]]
    bodies = [
        {"dataframe_split": rows.to_dict(orient="split", index=False)},
        {"dataframe_split": backwards.to_dict(orient="split", index=False)},
        {"dataframe_split": {"data": rows.to_numpy().tolist()}},  # no names: in order
        {"dataframe_records": backwards.to_dict(orient="records")},
        {"instances": rows.to_numpy().tolist()},
        {"instances": backwards.to_dict(orient="records")},
        {"inputs": rows.to_numpy().tolist()},
        {"inputs": backwards.to_dict(orient="list")},
        {"inputs": rows.to_numpy().round().astype(int).tolist()},  # integers: as the file
        example,
        {"dataframe_split": rows.drop(columns="hue").to_dict(orient="split", index=False)},
    ]
    answers = serve_and_predict(f"sqlite:///{store / 'mlflow.db'}", "models:/wine-csv/1",
                                bodies, tmp_path)
    *same, integers, served_example, refused = answers
    file = tmp_path / "run" / results["best"]["model"]
    expected = keras_predictions(file, rows.to_numpy())
    for body, (status, answer) in zip(bodies[:len(same)], same, strict=True):
        assert status == 200, (body, answer)
        np.testing.assert_array_equal(np.asarray(answer["predictions"], np.float32), expected,
                                      err_msg=next(iter(body)))
    assert integers[0] == 200
    np.testing.assert_array_equal(np.asarray(integers[1]["predictions"], np.float32),
                                  keras_predictions(file, rows.to_numpy().round().astype(int)))
    np.testing.assert_array_equal(
        np.asarray(served_example[1]["predictions"], np.float32),
        keras_predictions(file, np.asarray(example["dataframe_split"]["data"])))
    status, answer = refused
    assert status == 400 and answer["error_code"] == "INVALID_PARAMETER_VALUE"
    assert answer["message"].splitlines()[-1].startswith(
        "Error: missing column 'hue': the model takes the columns 'alcohol', ")


def serve_and_predict(uri: str, model_uri: str, bodies: list[dict],
                      where: Path) -> list[tuple[int, dict]]:
    """``mlflow models serve`` on a loopback port, started once: its ``/invocations`` status
    and answer to each body; the server's whole process group ended after."""
    port = free_port()
    venv_bin = str(Path(sys.executable).parent)  # the server starts uvicorn by name
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
    log = open(where / "serve.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [str(Path(venv_bin, "mlflow")), "models", "serve", "-m", model_uri, "--env-manager",
         "local", "-h", "127.0.0.1", "-p", str(port)],
        cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url, started = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (where / "serve.log").read_text()[-3000:]
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/ping",
                                                                      timeout=5) as r:
                if r.status == 200:
                    break
            assert time.monotonic() < deadline, "mlflow models serve did not answer /ping"
            time.sleep(0.5)
        started = psutil.Process(proc.pid).children(recursive=True)
        answers = []
        for body in bodies:
            request = urllib.request.Request(f"{url}/invocations",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as r:
                    answers.append((r.status, json.loads(r.read())))
            except urllib.error.HTTPError as e:
                answers.append((e.code, json.loads(e.read())))
        return answers
    finally:
        with contextlib.suppress(psutil.Error):
            started = started or psutil.Process(proc.pid).children(recursive=True)
        stop_group(proc, started)
        log.close()
        assert not group_members(proc.pid), "mlflow models serve outlived the test"
