"""A user's data: arrays (.npz or in memory) and tables (CSV, Parquet) checked and read alike."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes, load_wine

from packexp.config import instantiate
from packexp.data import Dataset, Scaling, arrays, split, table
from packexp.data.arrays import from_arrays
from packexp.errors import ConfigError
from packexp.testing.config import compose_config

SOURCE = "packexp.tune(data=...)"
KEYS = ("x_train", "y_train", "x_val", "y_val")


@pytest.fixture(scope="module")
def wine() -> tuple[np.ndarray, np.ndarray]:
    """178 rows of 13 float64 features with up to 4 decimals: they round-trip through CSV."""
    data = load_wine()
    return data.data, data.target


def make(x, y, x_val=None, y_val=None, **kwargs) -> Dataset:
    return from_arrays(x, y, x_val, y_val, name="mine", source=SOURCE, **kwargs)


def assert_same(a: Dataset, b: Dataset) -> None:
    assert a.num_classes == b.num_classes
    for key in KEYS:
        got, want = getattr(a, key), getattr(b, key)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def write_table(file: Path, x: np.ndarray, y, columns=None, target="label") -> Path:
    frame = pd.DataFrame(x, columns=columns or [f"f{i}" for i in range(x.shape[1])])
    frame[target] = y
    if file.suffix == ".csv":
        frame.to_csv(file, index=False)
    else:
        frame.to_parquet(file, engine="pyarrow")
    return file


def small(n_per_class: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1], n_per_class)
    return rng.normal(size=(len(y), 3)), y


class TestFromArrays:
    def test_features_are_standardised_with_the_training_splits_statistics(self, wine):
        x, y = wine
        data = make(x, y, seed=3)
        raw = split("raw", x, y, 0.2, 3, num_classes=3)  # the same rows, still float64
        # In float32, as the kept model's Normalization layer computes it (data.Scaling).
        mean = raw.x_train.astype(np.float32).mean(axis=0, dtype=np.float64).astype(np.float32)
        std = raw.x_train.astype(np.float32).std(axis=0, dtype=np.float64).astype(np.float32)
        np.testing.assert_array_equal(data.inputs.mean, mean)
        np.testing.assert_array_equal(data.inputs.std, std)
        for rows, scaled in ((raw.x_train, data.x_train), (raw.x_val, data.x_val)):
            np.testing.assert_array_equal(scaled, (rows.astype(np.float32) - mean) / std)
        assert data.x_train.dtype == data.x_val.dtype == np.float32
        np.testing.assert_allclose(data.x_train.mean(axis=0), 0, atol=1e-6)
        np.testing.assert_allclose(data.x_train.std(axis=0), 1, atol=1e-6)
        # The validation split is not standardised on its own statistics.
        assert np.abs(data.x_val.mean(axis=0)).max() > 0.05

    def test_a_constant_feature_is_only_shifted(self):
        x, y = small()
        x[:, 1] = 5.0
        data = make(x, y)
        assert (data.x_train[:, 1] == 0).all() and (data.x_val[:, 1] == 0).all()
        assert np.isfinite(data.x_train).all()

    def test_without_standardize_features_are_only_cast(self, wine):
        x, y = wine
        data = make(x, y, standardize=False, seed=1)
        raw = split("raw", x, y, 0.2, 1, num_classes=3)
        np.testing.assert_array_equal(data.x_train, raw.x_train.astype(np.float32))
        np.testing.assert_array_equal(data.y_val, raw.y_val)

    def test_uint8_images_are_left_as_they_are(self):
        x = np.random.default_rng(0).integers(0, 256, size=(12, 4, 5, 3), dtype=np.uint8)
        y = np.repeat([0, 1, 2], 4)
        data = make(x, y, val_fraction=0.25)
        assert data.x_train.dtype == np.uint8 and data.input_shape == (4, 5, 3)
        assert_same(data, split("mine", x, y, 0.25, 0, num_classes=3))

    def test_the_split_is_seeded_and_stratified(self, wine):
        x, y = wine
        a, b, c = (make(x, y, seed=s) for s in (1, 1, 2))
        assert_same(a, b)
        assert not np.array_equal(a.y_val, c.y_val)
        assert len(a.x_val) == 36
        assert np.bincount(a.y_val).tolist() == [12, 14, 10]  # 59, 71, 48 of 178, a fifth each

    def test_given_validation_arrays_are_used_as_is_with_the_training_statistics(self, wine):
        x, y = wine
        data = make(x[:100], y[:100], x[100:], y[100:], val_fraction=0.5)
        scaling = Scaling.fitted(x[:100])  # in float32, as the kept model's first layer
        np.testing.assert_array_equal(data.inputs.mean, scaling.mean)
        np.testing.assert_array_equal(data.x_train, scaling(x[:100]))
        np.testing.assert_array_equal(data.x_val, scaling(x[100:]))
        np.testing.assert_allclose(scaling.mean, x[:100].mean(axis=0), rtol=1e-5)
        np.testing.assert_array_equal(data.y_train, y[:100])
        np.testing.assert_array_equal(data.y_val, y[100:])

    def test_string_labels_map_to_the_sorted_values_of_both_splits(self):
        x, _ = small(3)
        y = ["dog", "cat", "emu", "dog", "cat", "emu"]
        data = make(x, np.array(y, dtype=object), x[:2], ["fox", "cat"])
        assert data.num_classes == 4  # cat, dog, emu, fox: fox only in validation
        assert data.y_train.tolist() == [1, 0, 2, 1, 0, 2]
        assert data.y_val.tolist() == [3, 0]
        assert data.y_train.dtype == data.y_val.dtype == np.int32

    def test_integer_labels_map_to_0_to_k_minus_1(self):
        x, _ = small(3)
        data = make(x, [10, 3, 7, 10, 3, 7], x[:1], [7])
        assert (data.y_train.tolist(), data.y_val.tolist(), data.num_classes) == (
            [2, 0, 1, 2, 0, 1], [1], 3)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda a: {**a, "x": a["x"][:, 0]}, r"x has shape \(10,\) and dtype float64; must be "
                                                 r"\[n, features\] numbers, \[n, steps"),
            (lambda a: {**a, "x": np.zeros((10, 4, 4), np.uint8)},
             r"x has shape \(10, 4, 4\) .*add a channel axis"),
            (lambda a: {**a, "x": np.zeros((10, 4, 4, 1), np.float32)},
             r"x has shape \(10, 4, 4, 1\) and dtype float32"),
            (lambda a: {**a, "x": a["x"].astype(str)}, r"x has dtype <U\d+; must be"),
            (lambda a: {**a, "x": a["x"].astype(object)}, r"x has dtype object"),
            (lambda a: {**a, "x": np.zeros((0, 3))}, r"x is empty \(shape \(0, 3\)\)"),
            (lambda a: {**a, "y": a["y"][:9]}, r"y has shape \(9,\); must be 1-D, one label per "
                                               r"row of x \(10\)"),
            (lambda a: {**a, "y": np.eye(2)[a["y"]]}, r"y has shape \(10, 2\)"),
            (lambda a: {**a, "y": np.where(np.arange(10) == 3, np.nan, a["y"])},
             r"y has a missing label \(nan\) at row 3"),
            (lambda a: {**a, "y": [None if i == 4 else "a" for i in range(10)]},
             r"y has a missing label at row 4"),
            (lambda a: {**a, "y": ["a", 1] * 5}, r"y mixes strings and other values"),
            (lambda a: {**a, "y": np.zeros(10, int)}, r"the labels have one class \(0\); a "
                                                      r"classifier needs at least 2"),
            (lambda a: {**a, "x_val": a["x"]}, r"x_val without y_val; give both or neither"),
            (lambda a: {**a, "y_val": a["y"]}, r"y_val without x_val"),
            (lambda a: {**a, "x_val": a["x"][:3], "y_val": a["y"][:2]},
             r"y_val has shape \(2,\); must be 1-D, one label per row of x_val \(3\)"),
            (lambda a: {**a, "x_val": a["x"][:3, :2], "y_val": a["y"][:3]},
             r"x_val has shape \(3, 2\) and x \(10, 3\)"),
            (lambda a: {**a, "x_val": a["x"][:0], "y_val": a["y"][:0]}, r"x_val is empty"),
            (lambda a: {**a, "x_val": a["x"][:2], "y_val": ["a", "b"]},
             r"y has int64 labels and y_val <U1; both must be numbers or both strings"),
        ],
        ids=["1d", "3d", "float_images", "strings", "objects", "empty", "short_y", "one_hot",
             "nan_label", "none_label", "mixed_labels", "one_class", "x_val_alone",
             "y_val_alone", "short_y_val", "x_val_shape", "empty_val", "label_kinds"],
    )
    def test_bad_arrays_fail_with_one_line_naming_the_source(self, change, message):
        x, y = small()
        given = change({"x": x, "y": y, "x_val": None, "y_val": None})
        with pytest.raises(ConfigError, match=rf"^{re.escape(SOURCE)}: {message}") as info:
            make(**given)
        one_line(info)

    @pytest.mark.parametrize(("key", "where"), [("x", (7, 2)), ("x_val", (1, 0))])
    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_a_non_finite_feature_names_its_first_row_and_column(self, key, where, bad):
        x, y = small()
        arrays_ = {"x": x, "y": y, "x_val": x[:4].copy(), "y_val": y[:4]}
        arrays_[key][where] = bad
        arrays_[key][where[0] + 1, 0] = np.nan  # a later row: not the first
        with pytest.raises(ConfigError, match=rf"^{re.escape(SOURCE)}: {key} has {bad} at row "
                                              rf"{where[0]}, column {where[1]}; ") as info:
            make(**arrays_)
        one_line(info)

    @pytest.mark.parametrize(
        ("y", "why"),
        [(["a"] * 9 + ["b"], "the smallest class, 'b', has 1"),
         (["a", "b", "c"] * 3 + ["a"], "2 examples for 3 classes")],
        ids=["smallest_class", "too_few_held_out"])
    def test_a_class_too_small_to_split_says_why_in_one_line(self, y, why):
        x, _ = small()
        with pytest.raises(ConfigError) as info:
            make(x, np.array(y))
        assert one_line(info) == (f"{SOURCE}: cannot hold out val_fraction=0.2 of 10 examples "
                                  f"stratified by class ({why})")  # no hint: strings are classes


def save_npz(file: Path, **arrays_) -> str:
    np.savez(file, **arrays_)
    return str(file)


class TestArraysFile:
    def test_loads_what_from_arrays_gives(self, wine, tmp_path):
        x, y = wine
        path = save_npz(tmp_path / "wine.npz", x=x, y=y)
        data = arrays.load(path, val_fraction=0.3, seed=4)
        assert data.name == "arrays"
        assert_same(data, make(x, y, val_fraction=0.3, seed=4))

    def test_validation_arrays_and_string_labels_in_the_file(self, tmp_path):
        x, _ = small(3)
        names = np.array(["b", "a", "c"] * 2)  # a NumPy string array: no pickle needed
        path = save_npz(tmp_path / "d.npz", x=x, y=names, x_val=x[:2], y_val=names[:2])
        data = arrays.load(path)
        assert data.y_train.tolist() == [1, 0, 2, 1, 0, 2] and data.y_val.tolist() == [1, 0]
        assert_same(data, make(x, names, x[:2], names[:2]))

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            ({"x": np.zeros((4, 2))}, r"no array 'y' in the file \(it holds x\); write it with "
                                      r"np\.savez\(path, x=\.\.\., y=\.\.\.\)"),
            ({"features": np.zeros((4, 2)), "y": np.arange(4)}, r"no array 'x' in the file "
                                                                r"\(it holds features, y\)"),
            ({"x": np.zeros((4, 2)), "y": np.arange(4), "x_val": np.zeros((2, 2))},
             r"x_val without y_val"),
            ({"x": np.zeros((4, 2)), "y": np.array(["a", 1, "b", 2], dtype=object)},
             r"cannot read array 'y' \(Object arrays cannot be loaded when allow_pickle=False"),
        ],
        ids=["no_y", "no_x", "x_val_alone", "objects"],
    )
    def test_a_bad_file_names_itself_and_the_problem(self, tmp_path, content, message):
        path = save_npz(tmp_path / "d.npz", **content)
        with pytest.raises(ConfigError, match=rf"^dataset\.path={re.escape(path)}: {message}"
                           ) as info:
            arrays.load(path)
        one_line(info)

    @pytest.mark.parametrize("what", ["missing", "npy", "text"])
    def test_no_npz_archive_names_the_file(self, tmp_path, what):
        file = tmp_path / ("d.npy" if what == "npy" else "d.npz")
        if what == "npy":
            np.save(file, np.zeros(3))
        elif what == "text":
            file.write_text("x,y\n1,2\n")
        reason = "no such file" if what == "missing" else "not a .npz archive"
        with pytest.raises(ConfigError, match=rf"^dataset\.path={re.escape(str(file))}: "
                                              f"{reason}; ") as info:
            arrays.load(str(file))
        one_line(info)


class TestTable:
    @pytest.mark.parametrize("suffix", [".csv", ".parquet", ".pq"])
    @pytest.mark.parametrize("labels", ["integers", "strings"])
    def test_a_file_gives_bit_for_bit_the_arrays_dataset(self, wine, tmp_path, suffix, labels):
        x, y = wine
        if labels == "strings":
            y = np.array(["barolo", "grignolino", "barbera"])[y]  # not in sorted order
        path = write_table(tmp_path / f"wine{suffix}", x, y)
        frame = pd.read_csv(path, float_precision="round_trip") if suffix == ".csv" else None
        if frame is not None:  # the premise: the CSV holds exactly the arrays' floats
            np.testing.assert_array_equal(frame.iloc[:, :13].to_numpy(), x)
        for standardize in (True, False):
            data = table.load(str(path), "label", val_fraction=0.25, standardize=standardize,
                              seed=5)
            assert data.name == "table"
            assert_same(data, make(x, y, val_fraction=0.25, standardize=standardize, seed=5))

    def test_features_choose_and_order_the_columns(self, wine, tmp_path):
        x, y = wine
        columns = ["a", "b", "c"]
        path = write_table(tmp_path / "t.csv", x[:, :3], y, columns)
        assert_same(table.load(str(path), "label", features=["c", "a"]),
                    make(x[:, [2, 0]], y))

    def test_every_other_column_in_file_order_is_a_feature_by_default(self, wine, tmp_path):
        x, y = wine
        frame = pd.DataFrame({"b": x[:, 0], "kind": y, "a": x[:, 1]})
        frame.to_csv(tmp_path / "t.csv", index=False)
        assert_same(table.load(str(tmp_path / "t.csv"), "kind"), make(x[:, :2], y))

    def test_a_numeric_target_name_from_the_command_line_finds_its_column(self, tmp_path):
        x, y = small()
        path = write_table(tmp_path / "t.csv", x, y, ["a", "b", "c"], target="0")
        assert_same(table.load(str(path), 0), make(x, y))

    @pytest.mark.parametrize("cache", ["memory", "none"])
    def test_a_pandas_index_column_is_dropped_with_one_warning(self, wine, tmp_path, caplog,
                                                               cache):
        x, y = wine
        order = np.argsort(y, kind="stable")  # sorted by label: the index would leak it
        x, y = x[order], y[order]
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
        frame["label"] = y
        path = tmp_path / "wine.csv"
        frame.to_csv(path)  # index=True: an unnamed first column 0..177
        assert path.read_text().startswith(",f0,")
        with caplog.at_level("WARNING", logger="packexp.data.table"):
            data = table.load(str(path), "label", cache=cache)
        if cache == "memory":
            assert_same(data, make(x, y))
        else:
            assert data.features == tuple(f"f{i}" for i in range(13))
        [record] = caplog.records
        assert record.levelname == "WARNING"
        assert record.getMessage() == (
            f"dataset.path={path}: dropped column 'Unnamed: 0', a pandas index (0..177; "
            "DataFrame.to_csv writes one unless index=False); dataset.features=[...] naming "
            "it keeps it")

    def test_a_true_false_column_is_said_once_and_trains_as_0_1(self, tmp_path, caplog):
        x, y = small()
        flag = x[:, 0] > np.median(x[:, 0])
        frame = pd.DataFrame({"a": x[:, 1], "flag": flag, "b": x[:, 2], "label": y})
        path = tmp_path / "t.csv"
        frame.to_csv(path, index=False)
        assert "True" in path.read_text()
        with caplog.at_level("WARNING", logger="packexp.data.table"):
            data = table.load(str(path), "label")
        assert_same(data, make(np.column_stack([x[:, 1], flag.astype(float), x[:, 2]]), y))
        [record] = caplog.records
        assert record.getMessage() == (
            f"dataset.path={path}: True/False column 'flag' used as 1/0 features; to leave it "
            "out: dataset.features=[a,b]")

    def test_an_index_column_named_in_features_is_kept(self, tmp_path, caplog):
        x, y = small()
        frame = pd.DataFrame(x, columns=["a", "b", "c"])
        frame["label"] = y
        frame.to_csv(tmp_path / "t.csv")
        with caplog.at_level("WARNING"):
            data = table.load(str(tmp_path / "t.csv"), "label", features=["Unnamed: 0", "a"])
        assert_same(data, make(np.column_stack([np.arange(10), x[:, 0]]), y))
        assert not caplog.records

    def test_an_unnamed_column_of_values_is_a_feature(self, tmp_path, caplog):
        x, y = small()
        frame = pd.DataFrame({"": x[:, 0], "a": x[:, 1], "label": y})  # not an index: floats
        frame.to_csv(tmp_path / "t.csv", index=False)
        with caplog.at_level("WARNING"):
            data = table.load(str(tmp_path / "t.csv"), "label")
        assert_same(data, make(x[:, :2], y))
        assert not caplog.records

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"target": None}, r"dataset\.target=None: name the label column of {path} as "
                               r"dataset\.target=\.\.\.; its columns: a, color, b, label$"),
            ({"target": "kind"}, r"dataset\.target=kind: no such column in {path}; its "
                                 r"columns: a, color, b, label$"),
            ({"features": ["a", "z"]}, r"dataset\.features: no column 'z' in {path}; its "
                                       r"columns: a, color, b, label$"),
            ({"features": ["a", "label"]}, r"dataset\.features: lists the target 'label'"),
            ({"features": "a"}, r"dataset\.features='a': must be a list of column names"),
            ({"features": []}, r"dataset\.features=\[\]: must be a list"),
            ({}, r"dataset\.path={path}: column 'color' is not numeric \(e\.g\. 'red'\); "
                 r"encode it as numbers, or leave it out with dataset\.features=\[a,b\]$"),
        ],
        ids=["no_target", "unknown_target", "unknown_feature", "target_as_feature",
             "features_string", "no_features", "text_feature"],
    )
    def test_bad_columns_fail_with_one_line_naming_key_and_file(self, tmp_path, kwargs, message):
        x, y = small()
        frame = pd.DataFrame({"a": x[:, 0], "color": ["red", "blue"] * 5, "b": x[:, 1],
                              "label": y})
        path = tmp_path / "t.csv"
        frame.to_csv(path, index=False)
        kwargs = {"target": "label", **kwargs}
        with pytest.raises(ConfigError, match="^" + message.format(path=re.escape(str(path)))
                           ) as info:
            table.load(str(path), **kwargs)
        one_line(info)

    @pytest.mark.parametrize(
        ("suffix", "where"), [(".csv", r"row 3 \(line 5\)"), (".parquet", "row 3")])
    @pytest.mark.parametrize(("bad", "shown"), [(np.nan, "a missing value"), (np.inf, "inf")])
    def test_a_bad_feature_value_names_its_column_and_first_row(self, tmp_path, suffix, where,
                                                                bad, shown):
        x, y = small()
        x[3, 1] = x[6, 0] = bad
        path = write_table(tmp_path / f"t{suffix}", x, y, ["a", "b", "c"])
        with pytest.raises(ConfigError, match=rf"^dataset\.path={re.escape(str(path))}: column "
                                              rf"'b' has {shown} at {where}; ") as info:
            table.load(str(path), "label")
        one_line(info)

    @pytest.mark.parametrize(
        ("y", "message"),
        [
            (["a", "b", None, "a", "b", "a", "b", "a", "b", "a"],
             r"dataset\.target=label: missing label at row 2 \(line 4\) of {path}$"),
            ([1.0, 0.0, 1.0, np.nan, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
             r"dataset\.target=label: missing label at row 3 \(line 5\) of {path}$"),
            (["a"] * 10, r"dataset\.path={path}: the labels have one class \('a'\)"),
            (["a"] * 9 + ["b"], r"dataset\.path={path}: cannot hold out val_fraction=0\.2 of "
                                r"10 examples stratified by class \(the smallest class, 'b', "
                                r"has 1\)"),
        ],
        ids=["missing_string", "missing_number", "one_class", "class_too_small"],
    )
    def test_bad_labels_fail_with_one_line(self, tmp_path, y, message):
        x, _ = small()
        path = write_table(tmp_path / "t.csv", x, y)
        with pytest.raises(ConfigError, match="^" + message.format(path=re.escape(str(path)))
                           ) as info:
            table.load(str(path), "label")
        one_line(info)

    @pytest.mark.parametrize("cache", ["memory", "none"])
    @pytest.mark.parametrize("target", ["real", "whole"])
    def test_a_continuous_target_hints_at_objective_regression(self, tmp_path, cache, target):
        data = load_diabetes()  # 442 rows; its targets, 25 to 346, are whole numbers as floats
        y = data.target + (0.5 if target == "real" else 0.0)
        path = write_table(tmp_path / "diabetes.csv", data.data, y)
        where = f"dataset.path={path}" if cache == "memory" else "dataset.target=label"
        message = (f"{where}: the labels are real numbers (214 distinct values, e.g. 151.5), "
                   "not classes; for a regression add objective=regression"
                   if target == "real" else
                   f"{where}: cannot hold out val_fraction=0.2 of 442 examples stratified by "
                   "class (the smallest class, 25.0, has 1); if the labels are a real-valued "
                   "target (214 distinct numbers), add objective=regression")
        with pytest.raises(ConfigError) as info:
            table.load(str(path), "label", cache=cache)
        assert one_line(info) == message
        assert table.load(str(path), "label", cache=cache, regression=True).regression

    def test_too_few_examples_per_class_in_arrays_hint_at_objective_regression(self):
        x, _ = small()
        with pytest.raises(ConfigError) as info:
            make(x, np.arange(10) * 3)
        assert one_line(info) == (
            f"{SOURCE}: cannot hold out val_fraction=0.2 of 10 examples stratified by class "
            "(the smallest class, 0, has 1); if the labels are a real-valued target (10 "
            "distinct numbers), add objective=regression")

    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("t.txt", "a,label\n1,0\n", r"unknown suffix '\.txt'; dataset=table reads \.csv, "
                                        r"\.parquet and \.pq files"),
            ("t.csv", None, r"no such file; pass a CSV"),
            ("t.parquet", "not parquet", r"cannot read as Parquet \("),
            ("t.csv", "a,label\n", r"no rows$"),
            ("t.csv", "label\n0\n1\n", r"no column besides the target 'label'$"),
        ],
        ids=["suffix", "missing", "corrupt", "no_rows", "no_features"],
    )
    def test_a_bad_file_names_itself(self, tmp_path, name, content, message):
        path = tmp_path / name
        if content is not None:
            path.write_text(content)
        with pytest.raises(ConfigError, match=rf"^dataset\.path={re.escape(str(path))}: "
                                              f"{message}") as info:
            table.load(str(path), "label")
        one_line(info)


class TestConfig:
    def test_the_configs_load_the_same_data_as_arrays_and_as_a_table(self, wine, tmp_path):
        x, y = wine
        csv = write_table(tmp_path / "wine.csv", x, y)
        npz = save_npz(tmp_path / "wine.npz", x=x, y=y)
        data = [instantiate(compose_config(overrides).dataset, "dataset") for overrides in (
            ["dataset=table", f"dataset.path={csv}", "dataset.target=label", "seed=2"],
            ["dataset=arrays", f"dataset.path={npz}", "seed=2"])]
        assert_same(data[0], data[1])
        assert_same(data[0], make(x, y, seed=2))

    def test_features_from_the_command_line(self, wine, tmp_path):
        x, y = wine
        csv = write_table(tmp_path / "wine.csv", x[:, :3], y, ["a", "b", "c"])
        cfg = compose_config(["dataset=table", f"dataset.path={csv}", "dataset.target=label",
                              "dataset.features=[c,a]", "dataset.standardize=false"])
        assert_same(instantiate(cfg.dataset, "dataset"),
                    make(x[:, [2, 0]], y, standardize=False))

    def test_a_loaders_config_error_reaches_the_user_unchanged(self, tmp_path):
        x, y = small()
        csv = write_table(tmp_path / "t.csv", x, y)
        cfg = compose_config(["dataset=table", f"dataset.path={csv}"])
        with pytest.raises(ConfigError) as direct:
            table.load(str(csv))
        with pytest.raises(ConfigError, match=r"^dataset\.target=None: ") as info:
            instantiate(cfg.dataset, "dataset")
        assert one_line(info) == str(direct.value)

    @pytest.mark.parametrize("name", ["table", "arrays"])
    def test_a_bad_val_fraction_names_the_key(self, tmp_path, name):
        x, y = small()
        if name == "table":
            keys = [f"dataset.path={write_table(tmp_path / 't.csv', x, y)}",
                    "dataset.target=label"]
        else:
            keys = [f"dataset.path={save_npz(tmp_path / 't.npz', x=x, y=y)}"]
        cfg = compose_config([f"dataset={name}", *keys, "dataset.val_fraction=1"])
        with pytest.raises(ConfigError, match=r"^dataset\.val_fraction=1: must be between 0 "
                                              r"and 1$"):
            instantiate(cfg.dataset, "dataset")
