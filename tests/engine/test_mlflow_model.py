"""The search's best model as an MLflow Model: the settings, the input example, the folder
against ``mlflow.keras``'s, and served by ``mlflow models serve`` from a CSV search. Logged on
the parent run by the MLflow writer, registered and loaded back through pyfunc:
tests/system/test_mlflow_model.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import yaml
from omegaconf import OmegaConf
from sklearn.datasets import load_digits

from packexp.data import Dataset, Scaling
from packexp.records.search_result import SearchResult
from packexp.testing.command import packexp as run_cli
from packexp.testing.processes import free_port
from packexp.tracking import MlflowTracker, NullTracker, keras_file
from packexp.tracking.models import (
    EXAMPLE_VALUES,
    example_rows,
    feature_columns,
    log_best_model,
    registered_name,
)
from tests.system.test_mlflow_server import group_members, stop_group


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data, digits.target


def keras_predictions(path: Path, rows: np.ndarray) -> np.ndarray:
    import keras

    return keras.saving.load_model(path).predict(np.asarray(rows, np.float32), verbose=0)


# The settings and the input example, without MLflow or TensorFlow.


@pytest.mark.parametrize("value", ["", "  ", True, 1.5, ["a"]])
def test_register_as_takes_a_name_or_null_and_says_so_in_one_line(value):
    with pytest.raises(ValueError, match=r"^register_as=.*registered model's name") as e:
        MlflowTracker(register_as=value)
    assert "\n" not in str(e.value)


def test_register_as_names_are_strings():
    assert registered_name(None) is None
    assert registered_name("digits") == "digits"
    assert registered_name(2024) == "2024"  # tracking.register_as=2024 on the command line


def test_a_tracker_that_keeps_no_run_logs_no_model(tmp_path):
    result = SearchResult.of(tmp_path, {"trials": [], "packs": [], "best": {
        "trial_id": "b0-t000", "hparams": {}, "epochs": 1, "model": "models/b0-t000.keras"}})
    assert log_best_model(NullTracker(), result, tmp_path, dataset=None) is None
    assert NullTracker().log_model(None) is None


def test_the_example_is_the_users_rows_the_scaling_undone():
    raw = np.random.default_rng(0).normal(5.0, 3.0, (40, 6)).astype(np.float32)
    scaling = Scaling.fitted(raw)
    data = Dataset("t", scaling(raw), np.zeros(40, np.int32), scaling(raw[:10]),
                   np.zeros(10, np.int32), 2, inputs=scaling)
    example = example_rows(data)
    assert example.dtype == np.float32 and example.shape == (5, 6)
    np.testing.assert_allclose(example, raw[:5], rtol=1e-5, atol=1e-5)


def test_large_images_give_one_row_as_floats():
    images = np.zeros((3, 64, 64, 3), np.uint8)
    data = Dataset("i", images, np.zeros(3, np.int32), images, np.zeros(3, np.int32), 2)
    example = example_rows(data)
    assert example.shape == (1, 64, 64, 3) and example.dtype == np.float32
    assert EXAMPLE_VALUES // (64 * 64 * 3) == 1


def test_a_tables_feature_columns_are_its_header_but_the_target(tmp_path):
    csv = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0], "label": [0], "b c": [2.0], "d": [3.0]}).to_csv(csv, index=False)
    cfg = OmegaConf.create({"dataset": {"_target_": "packexp.data.table.load", "path": str(csv),
                                        "target": "label", "features": None}})
    three = Dataset("table", np.zeros((1, 3)), np.zeros(1), np.zeros((1, 3)), np.zeros(1), 2)
    assert feature_columns(cfg, three) == ("a", "b c", "d")
    cfg.dataset.features = ["d", "a"]
    two = Dataset("table", np.zeros((1, 2)), np.zeros(1), np.zeros((1, 2)), np.zeros(1), 2)
    assert feature_columns(cfg, two) == ("d", "a")
    assert feature_columns(cfg, three) is None  # they would not match the rows
    digits = OmegaConf.create({"dataset": {"_target_": "packexp.data.digits.load"}})
    assert feature_columns(digits, three) is None


def test_a_kept_file_must_be_a_whole_model_with_rows_to_show(tmp_path):
    weights = tmp_path / "b0-t000.weights.h5"
    weights.write_bytes(b"")
    with pytest.raises(ValueError, match=r"not a whole-model \.keras file"):
        keras_file(weights, np.zeros((1, 2)))
    whole = tmp_path / "b0-t000.keras"
    whole.write_bytes(b"")
    frame = pd.DataFrame([[1.0, 2.0]], columns=["x", "y"])
    model = keras_file(whole, frame, tags={"trial_id": "b0-t000", "rung": None})
    assert model.columns == ("x", "y") and model.example.dtype == np.float64
    assert dict(model.tags) == {"trial_id": "b0-t000"}
    assert any(r.startswith("keras==") for r in model.requirements)
    with pytest.raises(ValueError, match="3 column names"):
        keras_file(whole, np.zeros((1, 2)), columns=["a", "b", "c"])


# The MLflow Model folder, against the one mlflow.keras writes.


@pytest.mark.tf
def test_the_folder_is_the_one_mlflow_keras_save_model_writes(tmp_path):
    import keras
    import mlflow.keras
    import mlflow.pyfunc
    from mlflow.models import Model

    from packexp.tracking.mlflow_model import save_keras_file, signature

    inputs = keras.Input((4,), name="rows")
    net = keras.Model(inputs, keras.layers.Softmax()(keras.layers.Dense(3)(inputs)))
    net.save(tmp_path / "m.keras")
    frame = pd.DataFrame(np.arange(8, dtype=np.float64).reshape(2, 4), columns=list("abcd"))
    model = keras_file(tmp_path / "m.keras", frame, outputs=(3,))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    save_keras_file(model, ours, Model())
    theirs.mkdir()  # its save_model writes the example before it makes the folder
    mlflow.keras.save_model(net, str(theirs), signature=signature(model), input_example=frame,
                            pip_requirements=list(model.requirements))

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()}

    mine, reference = files(ours), files(theirs)
    assert mine.keys() == reference.keys()
    for name in mine.keys() - {"MLmodel", "data/model.keras"}:
        assert mine[name] == reference[name], name
    a, b = (yaml.safe_load(mine["MLmodel"]), yaml.safe_load(reference["MLmodel"]))
    for key in ("flavors", "signature", "saved_input_example_info", "mlflow_version"):
        assert a[key] == b[key], key
    loaded = mlflow.pyfunc.load_model(str(ours))
    np.testing.assert_array_equal(loaded.predict(frame), net.predict(frame.values, verbose=0))


# The command line's CSV search, its registered model served by mlflow models serve.


@pytest.mark.slow
@pytest.mark.tf
def test_a_csv_search_s_served_model_answers_as_the_run_s_file(tmp_path):
    x, y = digits_rows()
    columns = [f"px{i}" for i in range(64)]
    table = pd.DataFrame(x, columns=columns).assign(digit=y)
    table.to_csv(tmp_path / "digits.csv", index=False)
    store = tmp_path / "store"
    out = run_cli("dataset=table", f"dataset.path={tmp_path / 'digits.csv'}",
                  "dataset.target=digit", "experiment=quick", "strategy=knn", "tracking=mlflow",
                  f"tracking.store_dir={store}", "tracking.register_as=digits-csv",
                  f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "registered as models:/digits-csv/1" in out.stdout + out.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["mlflow_model"]["registered_as"] == "digits-csv"
    [example] = (store / "mlartifacts").rglob("serving_input_example.json")
    example = json.loads(example.read_text())  # the CSV's feature columns, by name
    assert example["dataframe_split"]["columns"] == columns
    rows = table[columns].iloc[:12]
    file = tmp_path / "run" / results["best"]["model"]
    served, served_example = serve_and_predict(
        f"sqlite:///{store / 'mlflow.db'}", "models:/digits-csv/1",
        [{"dataframe_split": rows.to_dict(orient="split", index=False)}, example], tmp_path)
    np.testing.assert_array_equal(np.asarray(served["predictions"], np.float32),
                                  keras_predictions(file, rows.values))
    np.testing.assert_array_equal(np.asarray(served_example["predictions"], np.float32),
                                  keras_predictions(file, example["dataframe_split"]["data"]))


def serve_and_predict(uri: str, model_uri: str, bodies: list[dict], where: Path) -> list[dict]:
    """``mlflow models serve`` on a loopback port: its ``/invocations`` answer to each body;
    the server's whole process group ended after."""
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
            with urllib.request.urlopen(request, timeout=120) as r:
                answers.append(json.loads(r.read()))
        return answers
    finally:
        with contextlib.suppress(psutil.Error):
            started = started or psutil.Process(proc.pid).children(recursive=True)
        stop_group(proc, started)
        log.close()
        assert not group_members(proc.pid), "mlflow models serve outlived the test"
