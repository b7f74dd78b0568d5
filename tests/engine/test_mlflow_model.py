"""The search's best model as an MLflow Model: the settings, the input example, the folder
against ``mlflow.keras``'s, and what its pyfunc takes (a wine-like CSV's model in a sqlite
store: tables by name, arrays of any number type, images, every served body form through the
scoring server's own parser). Logged by the MLflow writer, registered, served by ``mlflow
models serve``: tests/system/test_mlflow_model.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf
from sklearn.datasets import load_digits, load_wine

from packexp.data import Dataset, Scaling, table
from packexp.records.search_result import SearchResult
from packexp.tracking import MlflowTracker, NullTracker, keras_file
from packexp.tracking.models import (
    EXAMPLE_VALUES,
    example_rows,
    feature_columns,
    log_best_model,
    registered_name,
)


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return digits.data, digits.target


def wine_table() -> pd.DataFrame:
    """A wine-like table: 13 named feature columns of different scales, and its class."""
    wine = load_wine(as_frame=True)
    return wine.data.assign(cultivar=wine.target)


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


def dense_model(path: Path, shape: tuple[int, ...], scaling: Scaling | None, classes: int,
                images: bool = False) -> Path:
    """A kept model as ``packing.export.servable`` builds it (float32 ``rows``, then the
    standardisation or the pixels' rescaling, a network, ``Softmax``), saved whole."""
    import keras

    x = inputs = keras.Input(shape, dtype="float32", name="rows")
    if scaling is not None:
        x = keras.layers.Normalization(mean=scaling.mean, variance=np.square(
            scaling.std.astype(np.float64)), name="standardize")(x)
    if images:
        x = keras.layers.Normalization(mean=0.0, variance=255.0 ** 2, name="rescale")(x)
        x = keras.layers.Flatten()(keras.layers.Conv2D(4, 3, activation="relu")(x))
    x = keras.layers.Dense(16, activation="tanh")(x)
    model = keras.Model(inputs, keras.layers.Softmax(name="probabilities")(
        keras.layers.Dense(classes)(x)))
    model.save(path)
    return path


@pytest.mark.tf
def test_the_folder_is_mlflow_keras_s_with_packexp_s_loader(tmp_path):
    import keras
    import mlflow.keras
    import mlflow.pyfunc
    from mlflow.models import Model

    from packexp.tracking.mlflow_model import CODE, LOADER, save_keras_file, signature

    file = dense_model(tmp_path / "m.keras", (4,), None, 3)
    frame = pd.DataFrame(np.arange(8, dtype=np.float64).reshape(2, 4), columns=list("abcd"))
    model = keras_file(file, frame, outputs=(3,))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    save_keras_file(model, ours, Model())
    theirs.mkdir()  # its save_model writes the example before it makes the folder
    net = keras.saving.load_model(file)
    # its save_model takes a signature with an input schema only: ours has none (signature())
    mlflow.keras.save_model(net, str(theirs), input_example=frame,
                            pip_requirements=list(model.requirements))

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()}

    mine, reference = files(ours), files(theirs)
    assert mine.keys() == reference.keys() | {f"{CODE}/{LOADER}.py"}
    for name in reference.keys() - {"MLmodel", "data/model.keras"}:
        assert mine[name] == reference[name], name
    a, b = (yaml.safe_load(mine["MLmodel"]), yaml.safe_load(reference["MLmodel"]))
    for key in ("saved_input_example_info", "mlflow_version"):
        assert a[key] == b[key], key
    assert a["signature"] == signature(model).to_dict() | {"params": None}
    assert a["flavors"]["keras"] == b["flavors"]["keras"]
    assert a["flavors"]["python_function"] == {
        **b["flavors"]["python_function"], "loader_module": LOADER, "code": CODE, "data": "data",
        "config": {"feature_columns": list("abcd")}}
    assert a["signature"]["inputs"] is None  # the model's predict checks them
    np.testing.assert_array_equal(mlflow.keras.load_model(str(ours)).predict(frame.values),
                                  net.predict(frame.values, verbose=0))
    np.testing.assert_array_equal(mlflow.pyfunc.load_model(str(ours)).predict(frame),
                                  net.predict(frame.values, verbose=0))


# What the logged model of a wine-like CSV takes: in a real sqlite store, loaded by pyfunc.


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    """The logged model of a search on a wine-like CSV, its ``.keras`` file and the CSV's
    feature rows: the columns' names from the file, the example its validation rows."""
    import keras
    import mlflow.pyfunc
    from mlflow import MlflowClient

    from packexp.tracking.mlflow_model import log_keras_file

    root = tmp_path_factory.mktemp("wine")
    wine_table().to_csv(root / "wine.csv", index=False)
    cfg = OmegaConf.create({"dataset": {"_target_": "packexp.data.table.load",
                                        "path": str(root / "wine.csv"), "target": "cultivar"}})
    data = table.load(str(root / "wine.csv"), "cultivar")
    file = dense_model(root / "b0-t000.keras", data.input_shape, data.inputs, data.num_classes)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("wine"))
    model = keras_file(file, example_rows(data), "model", feature_columns(cfg, data), (3,))
    logged = log_keras_file(client, run.info.run_id, model)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_URI", uri)
        served = mlflow.pyfunc.load_model(logged["uri"])
    rows = pd.read_csv(root / "wine.csv").drop(columns="cultivar")
    return served, keras.saving.load_model(file), rows


@pytest.mark.tf
def test_a_reordered_table_predicts_as_the_ordered_one_and_the_keras_file(wine):
    served, keras_model, rows = wine
    expected = keras_model.predict(rows.to_numpy(), verbose=0)
    columns = list(rows.columns)
    np.testing.assert_array_equal(served.predict(rows), expected)
    np.testing.assert_array_equal(served.predict(rows[columns[::-1]]), expected)
    shuffled = list(np.random.default_rng(0).permutation(columns))
    np.testing.assert_array_equal(served.predict(rows[shuffled]), expected)
    # taken in order, the reordered columns would answer otherwise: the names are what match
    assert not np.allclose(keras_model.predict(rows[columns[::-1]].to_numpy(), verbose=0),
                           expected, atol=1e-3)


@pytest.mark.tf
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint16"])
def test_arrays_of_every_number_type_predict_as_the_keras_file(wine, dtype):
    served, keras_model, rows = wine
    x = rows.to_numpy().round().astype(dtype) if dtype[0] in "iu" else \
        rows.to_numpy().astype(dtype)
    np.testing.assert_array_equal(served.predict(x), keras_model.predict(x, verbose=0))
    np.testing.assert_array_equal(served.predict(pd.DataFrame(x, columns=rows.columns)),
                                  keras_model.predict(x, verbose=0))


@pytest.mark.tf
def test_a_table_without_names_is_taken_in_order(wine):
    served, keras_model, rows = wine
    expected = keras_model.predict(rows.to_numpy(), verbose=0)
    np.testing.assert_array_equal(served.predict(pd.DataFrame(rows.to_numpy())), expected)
    np.testing.assert_array_equal(served.predict(rows.to_numpy().tolist()), expected)


@pytest.mark.tf
@pytest.mark.parametrize(("change", "says"), [
    (lambda t: t.drop(columns="alcohol"), r"^missing column 'alcohol': the model takes the "
                                          r"columns 'alcohol', 'malic_acid', .* in any order$"),
    (lambda t: t.rename(columns={"hue": "Hue"}), r"^missing column 'hue'; unknown column 'Hue'"),
    (lambda t: t.assign(cultivar=0), r"^unknown column 'cultivar'"),
    (lambda t: t.assign(hue="pale"), r"^column 'hue' holds values that are not numbers"),
    (lambda t: t.to_numpy()[:, :12], r"^input of shape \[178, 12\]: the model takes \[n, 13\]"),
    (lambda t: t.to_numpy()[0], r"^input of shape \[13\]: the model takes \[n, 13\]"),
    (lambda t: t.iloc[:0], r"^no rows"),
])
def test_what_does_not_fit_is_refused_in_one_line_naming_it(wine, change, says):
    from mlflow.exceptions import MlflowException

    served, _, rows = wine
    with pytest.raises(MlflowException, match=says) as e:
        served.predict(change(rows))
    assert "\n" not in e.value.message
    assert e.value.error_code == "INVALID_PARAMETER_VALUE"  # a served request's 400


@pytest.mark.tf
def test_the_signature_and_the_example_say_what_goes_in(wine):
    import mlflow.artifacts

    served, keras_model, rows = wine
    meta = served.metadata
    assert meta.get_input_schema() is None  # any number type reaches the model's predict
    assert [(s.type, s.shape) for s in meta.get_output_schema().inputs] == [(np.float32, (-1, 3))]
    pyfunc = meta.flavors["python_function"]
    assert pyfunc["config"] == {"feature_columns": list(rows.columns)}
    example = json.loads(Path(mlflow.artifacts.download_artifacts(
        f"{meta.artifact_path}/serving_input_example.json")).read_text())["dataframe_split"]
    assert example["columns"] == list(rows.columns)  # the CSV's header but the target
    frame = pd.DataFrame(example["data"], columns=example["columns"])
    np.testing.assert_array_equal(served.predict(frame),
                                  keras_model.predict(frame.to_numpy(), verbose=0))


@pytest.mark.tf
def test_every_served_body_form_answers_as_the_keras_file(wine):
    """The scoring server's own parse and predict (``mlflow models serve``'s, in this
    process): the same rows in each of its four JSON forms, by name or in order."""
    from mlflow.pyfunc.scoring_server import invocations

    served, keras_model, rows = wine
    rows = rows.iloc[:7]
    backwards = rows[list(rows.columns)[::-1]]
    bodies = {
        "dataframe_split": {"dataframe_split": backwards.to_dict(orient="split", index=False)},
        "dataframe_split in order": {"dataframe_split": {"data": rows.to_numpy().tolist()}},
        "dataframe_records": {"dataframe_records": backwards.to_dict(orient="records")},
        "instances": {"instances": rows.to_numpy().tolist()},
        "instances as records": {"instances": backwards.to_dict(orient="records")},
        "inputs": {"inputs": rows.to_numpy().tolist()},
        "inputs as columns": {"inputs": backwards.to_dict(orient="list")},
    }
    expected = keras_model.predict(rows.to_numpy(), verbose=0)
    for form, body in bodies.items():
        answer = invocations(json.dumps(body), "application/json", served, None)
        assert answer.status == 200, (form, answer.response)
        np.testing.assert_array_equal(
            np.asarray(json.loads(answer.response)["predictions"], np.float32), expected,
            err_msg=form)


@pytest.mark.tf
def test_an_image_model_takes_uint8_and_float_images_as_the_keras_file(tmp_path):
    import keras
    import mlflow.pyfunc
    from mlflow.models import Model

    from packexp.tracking.mlflow_model import save_keras_file

    x, _ = digits_rows()
    images = (x.reshape(-1, 8, 8, 1) * 255 / 16).round().astype(np.uint8)[:20]
    file = dense_model(tmp_path / "i.keras", (8, 8, 1), None, 10, images=True)
    save_keras_file(keras_file(file, images[:2].astype(np.float32), outputs=(10,)),
                    tmp_path / "model", Model())
    served, net = mlflow.pyfunc.load_model(str(tmp_path / "model")), keras.saving.load_model(file)
    for dtype in ("uint8", "float32", "float64", "int64"):
        np.testing.assert_array_equal(served.predict(images.astype(dtype)),
                                      net.predict(images.astype(dtype), verbose=0), dtype)
    column = pd.DataFrame({"image": list(images)})  # a served dataframe of one image column
    np.testing.assert_array_equal(served.predict(column), net.predict(images, verbose=0))
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match=r"^input of shape \[20, 8, 8\]: the model "
                                              r"takes \[n, 8, 8, 1\]$"):
        served.predict(images[..., 0])
