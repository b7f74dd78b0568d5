"""Regression (``objective=regression``): real-valued targets, one output, squared error; each
program keeps isolation as it does for classes (plain and looped exact, fused to rounding)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from packexp.config import load_dataset
from packexp.data.arrays import from_arrays
from packexp.errors import ConfigError
from packexp.objectives import Objective
from packexp.testing.config import compose_config
from packexp.testing.members import CONFIGS, trial
from packexp.testing.searches import search

REGRESSION = Objective("val_mse", "min")


def friedman(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_friedman1

    return make_friedman1(n_samples=n, noise=1.0, random_state=seed)


def test_regression_targets_are_float32_values_split_at_random():
    x, y = friedman()
    data = from_arrays(x, y, name="t", source="test", regression=True, standardize_target=False)
    assert data.regression and data.num_classes == 1
    assert data.y_train.dtype == np.float32 and data.y_val.dtype == np.float32
    assert len(data.y_val) == 80 and len(np.unique(data.y_train)) == 320  # no classes made
    assert sorted(np.concatenate([data.y_train, data.y_val])) == sorted(y.astype(np.float32))


def test_targets_are_standardised_on_the_training_split_only():
    x, y = friedman()
    raw = from_arrays(x, y, name="t", source="test", regression=True, standardize_target=False)
    data = from_arrays(x, y, name="t", source="test", regression=True)
    assert raw.targets is None and data.targets is not None
    np.testing.assert_array_equal(data.x_train, raw.x_train)  # the same split and features
    train = raw.y_train.astype(np.float64)
    assert data.targets.mean == pytest.approx(train.mean(), rel=1e-6)
    assert data.targets.std == pytest.approx(train.std(), rel=1e-6)  # not the validation rows'
    assert data.targets.mean.shape == data.targets.std.shape == (1,)  # one output's column
    assert data.y_train.dtype == data.y_val.dtype == np.float32
    assert abs(data.y_train.mean()) < 1e-5 and data.y_train.std() == pytest.approx(1, rel=1e-5)
    # Validation targets go through the training split's map, not their own moments.
    np.testing.assert_array_equal(data.y_val, data.targets(raw.y_val))
    assert abs(data.y_val.mean()) > 1e-3
    np.testing.assert_allclose(data.targets.inverse(data.y_val), raw.y_val, rtol=1e-6)


def test_given_validation_targets_are_standardised_by_the_training_ones():
    x, y = friedman(100)
    y_val = y[80:] + 50  # far from the training targets: their moments must not be used
    data = from_arrays(x[:80], y[:80], x[80:], y_val, name="t", source="test",
                       regression=True)
    assert data.targets.mean == pytest.approx(y[:80].mean(), rel=1e-6)
    np.testing.assert_allclose(data.targets.inverse(data.y_val), y_val, rtol=1e-6)
    assert data.y_val.mean() > 5


def test_the_target_switch_is_a_bool_and_classes_ignore_it():
    x, y = friedman(40)
    with pytest.raises(ValueError, match=r"^standardize_target='no': must be true or false$"):
        from_arrays(x, y, name="t", source="test", regression=True, standardize_target="no")
    labels = (y > np.median(y)).astype(int)
    classes = from_arrays(x, labels, name="t", source="test")
    assert classes.targets is None and classes.y_train.dtype == np.int32


@pytest.mark.parametrize("standardize_target", [True, False])
def test_a_tables_targets_follow_the_key(tmp_path, standardize_target):
    import pandas as pd

    x, y = friedman(100)
    pd.DataFrame(x).add_prefix("f").assign(y=y).to_csv(tmp_path / "t.csv", index=False)
    cfg = compose_config(["objective=regression", "dataset=table",
                          f"dataset.path={tmp_path}/t.csv", "dataset.target=y",
                          f"dataset.standardize_target={str(standardize_target).lower()}"])
    data = load_dataset(cfg, REGRESSION)
    assert (data.targets is not None) == standardize_target
    values = data.targets.inverse(data.y_train) if standardize_target else data.y_train
    assert set(np.round(values, 3)) <= set(np.round(y.astype(np.float32), 3))


def test_a_regression_of_text_targets_or_class_datasets_is_one_line():
    x, _ = friedman(20)
    with pytest.raises(ConfigError, match=r"^test: y has <U1 values; a regression's targets "
                                          r"must be numbers$"):
        from_arrays(x, np.array(["a"] * 20), name="t", source="test", regression=True)
    with pytest.raises(ConfigError, match=r"^objective\.metric=val_mse: a regression needs "
                                          r"real-valued targets, and dataset=digits has "
                                          r"classes; use dataset=table or dataset=arrays$"):
        load_dataset(compose_config(["objective=regression"]), REGRESSION)


@pytest.fixture(scope="module")
def values():
    from packexp.packing import DeviceData

    x, y = friedman()
    return DeviceData(from_arrays(x, y, name="friedman1", source="test", regression=True))


@pytest.fixture(scope="module")
def raw_values():
    """The same split with the targets as given (``standardize_target=False``)."""
    from packexp.packing import DeviceData

    x, y = friedman()
    return DeviceData(from_arrays(x, y, name="friedman1", source="test", regression=True,
                                  standardize_target=False))


def train(data, configs, epochs=2, **settings):
    from packexp.models import mlp3
    from packexp.packing import Member, Pack
    from packexp.space.options import PackSettings

    build = functools.partial(mlp3.build, width=16)
    ds = data.dataset
    ms = [Member.create(trial(i, *c), build, ds.input_shape, 1, data.train_size)
          for i, c in configs]
    pack = Pack(ms, data, PackSettings(**settings))
    stats = pack.train({m.trial_id: m.steps_for(epochs) for m in ms})
    return ms, pack.evaluate(), stats


def assert_same(a, b) -> None:
    assert a.step == b.step
    for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


CONFIGS_R = [(i, (b, o, lr / 10, a)) for i, (b, o, lr, a) in enumerate(CONFIGS)]
PLAIN = {"fusion": "off", "jit_compile": False, "loop": "off", "chunk_steps": 7}


@pytest.mark.tf
@pytest.mark.parametrize("engine", [{"loop": "off"}, {"loop": "auto"}], ids=["plain", "looped"])
def test_a_packed_regression_member_ends_bit_for_bit_as_alone(values, engine):
    packed, evaluation, stats = train(values, CONFIGS_R, **{**PLAIN, **engine})
    assert stats.looped == (engine["loop"] == "auto")
    assert len({m.step for m in packed}) == len(packed), "budgets must be misaligned"
    for config, member in zip(CONFIGS_R, packed, strict=True):
        [alone], alone_evaluation, _ = train(values, [config], **PLAIN)
        assert_same(alone, member)
        assert alone_evaluation[member.trial_id] == evaluation[member.trial_id]


ENGINES = {"plain": PLAIN, "looped": {**PLAIN, "loop": "auto"},
           "fused": {"fusion": "on", "jit_compile": False}}


@pytest.mark.tf
@pytest.mark.parametrize("standardized", [True, False], ids=["standardized", "as_given"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_metrics_are_each_members_own_errors_in_the_targets_units(
        values, raw_values, standardized, engine):
    """Each program's recorded val_mse, val_mae and val_r2 are those of the member's
    predictions, mapped back to the targets' units, against the validation targets as given."""
    data = values if standardized else raw_values
    members, evaluation, stats = train(data, CONFIGS_R[1:3], **ENGINES[engine])
    assert stats.fused == (engine == "fused") and stats.looped == (engine == "looped")
    y = raw_values.dataset.y_val.astype(np.float64)  # the targets as given
    targets = data.dataset.targets
    assert (targets is not None) == standardized
    for m in members:
        predicted = m.model(data.dataset.x_val, training=False).numpy()[:, 0]
        if targets is not None:
            predicted = targets.inverse(predicted)
        predicted = predicted.astype(np.float64)
        e = evaluation[m.trial_id]
        assert e.val_accuracy is None and e.val_loss == e.val_mse
        assert e.val_mse == pytest.approx(np.mean((predicted - y) ** 2), rel=1e-4)
        assert e.val_mae == pytest.approx(np.mean(np.abs(predicted - y)), rel=1e-4)
        assert e.val_r2 == pytest.approx(
            1 - np.sum((predicted - y) ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-4)


@pytest.mark.tf
def test_summed_errors_of_standardised_targets_are_scaled_back():
    from packexp.data import Scaling
    from packexp.packing.targets import regression_metrics

    y = np.array([-1.0, 0.0, 1.0, 2.0], np.float32)
    scaling = Scaling(np.array([10.0], np.float32), np.array([3.0], np.float32))
    plain = regression_metrics(2.0, 2.5, y)
    scaled = regression_metrics(2.0, 2.5, y, scaling)
    assert plain == {"val_mse": 0.5, "val_mae": 0.625, "val_r2": 1 - 2.0 / 5.0}
    assert scaled == {"val_mse": 0.5 * 9, "val_mae": 0.625 * 3, "val_r2": plain["val_r2"]}


@pytest.mark.tf
@pytest.mark.parametrize("engine", [{"fusion": "on", "jit_compile": False},
                                    {"fusion": "off", "jit_compile": True}], ids=["fused", "xla"])
def test_fused_and_compiled_regression_packs_agree_with_plain_to_rounding(values, engine):
    """Other kernels, so float rounding differs; squared error amplifies it more than
    cross-entropy does, hence 1e-3 (classification: 1e-4)."""
    configs = CONFIGS_R[1:]  # Adam's updates amplify rounding (tests/engine/test_fused.py says why)
    packed, packed_evaluation, stats = train(values, configs, **engine)
    assert stats.fused == (engine["fusion"] == "on") and stats.xla == engine["jit_compile"]
    for config, member in zip(configs, packed, strict=True):
        [plain], plain_evaluation, _ = train(values, [config], **PLAIN)
        for a, b in zip(member.model.get_weights(), plain.model.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
        assert packed_evaluation[member.trial_id].val_mse == pytest.approx(
            plain_evaluation[member.trial_id].val_mse, rel=1e-3)


def test_a_regression_searches_the_regression_space_unless_told_otherwise():
    space = compose_config(["search_space=regression"]).search_space
    assert compose_config(["objective=regression"]).search_space == space
    assert "sigmoid" not in space.params.activation
    assert min(space.params.learning_rate) >= 1e-4
    table3 = compose_config(["search_space=table3"]).search_space
    for overrides in (["objective=regression", "search_space=table3"],
                      ["search_space=table3", "objective=regression"]):
        assert compose_config(overrides).search_space == table3  # the command line wins
    assert compose_config().search_space == table3  # a classification's default is kept
    assert compose_config(["objective=regression", "objective.metric=val_r2",
                           "objective.mode=max"]).search_space == space


@pytest.mark.tf
@pytest.mark.search
def test_a_regression_search_from_a_csv_ranks_by_the_lowest_mse(tmp_path, capsys):
    import pandas as pd

    x, y = friedman(600)
    table = pd.DataFrame(x, columns=[f"f{i}" for i in range(10)]).assign(y=y)
    table.to_csv(tmp_path / "friedman1.csv", index=False)
    results = search(tmp_path / "run", "objective=regression", "dataset=table",
                     f"dataset.path={tmp_path}/friedman1.csv", "dataset.target=y",
                     "scheduler.R=3", "tracking=none", strategy=None)
    assert results["objective"] == {"metric": "val_mse", "mode": "min"}
    rungs = [r for t in results["trials"] for r in t["rungs"] if r["val_mse"] is not None]
    assert all(r["val_accuracy"] is None and r["val_loss"] == r["val_mse"] for r in rungs)
    assert all({"val_mae", "val_r2"} <= set(r) for r in rungs)
    best = results["best"]
    assert best["metric"] == "val_mse" and best["value"] == min(r["val_mse"] for r in rungs)
    assert "val_mse" in capsys.readouterr().out  # the summary's table ranks by it


@pytest.mark.tf
def test_tune_takes_the_objective_by_name_or_as_a_dict(tmp_path):
    import packexp

    x, y = friedman(300)
    by_name = packexp.tune(data=(x, y), objective="regression", run_dir=tmp_path / "name",
                           tracking="none", scheduler={"R": 3})
    assert by_name.objective == {"metric": "val_mse", "mode": "min"}
    table = by_name.trials_dataframe()
    space = compose_config(["search_space=regression"]).search_space.params
    assert set(table["learning_rate"]) <= set(space.learning_rate)  # objective's own space
    assert set(table["batch_size"]) <= set(space.batch_size)
    assert {"val_mse", "val_mae", "val_r2"} <= set(table.columns)
    assert by_name.best_value == table["val_mse"].min()
    assert by_name.best_params == by_name.best["hparams"]
    by_dict = packexp.tune(data=(x, y), objective={"metric": "val_r2", "mode": "max"},
                           run_dir=tmp_path / "dict", tracking="none", scheduler={"R": 3})
    assert by_dict.objective == {"metric": "val_r2", "mode": "max"}
    assert by_dict.best_value == by_dict.trials_dataframe()["val_r2"].max()


@pytest.mark.tf
def test_a_reused_regression_program_ends_where_a_fresh_one_does(values):
    """The looped program of an architecture is kept for every later pack: members trained
    on it after other members ran on it end exactly as on a fresh one."""
    from packexp.packing import looped

    settings = {**PLAIN, "loop": "auto"}
    looped.PROGRAMS.clear()
    fresh, fresh_evaluation, stats = train(values, CONFIGS_R[:2], **settings)
    assert stats.looped and stats.programs == 1
    train(values, CONFIGS_R[2:], **settings)  # the program runs other members in between
    reused, reused_evaluation, stats = train(values, CONFIGS_R[:2], **settings)
    assert stats.programs == 0
    for a, b in zip(fresh, reused, strict=True):
        assert_same(a, b)
    assert fresh_evaluation == reused_evaluation


@pytest.mark.tf
def test_the_best_carries_every_metric_its_rung_recorded(tmp_path):
    """``best`` in results.json, on the result and on the MLflow parent run: a regression's
    val_mse, val_mae and val_r2 and its losses, as its rung recorded them."""
    import json

    from mlflow.tracking import MlflowClient

    import packexp

    x, y = friedman(300)
    store = tmp_path / "store"
    result = packexp.tune(data=(x, y), objective="regression", scheduler={"R": 3},
                          tracking="mlflow", overrides=[f"tracking.store_dir={store}"],
                          run_dir=tmp_path / "run")
    best, table = result.best, result.trials
    [rung] = table[(table.trial_id == best.trial_id) & (table.epochs == best.epochs)
                   & (table.val_mse == best.value)].to_dict("records")
    names = ("val_mse", "val_mae", "val_r2", "val_loss", "train_loss")
    assert {k: best[k] for k in names} == {k: rung[k] for k in names}
    assert dict(best.metrics) == {k: rung[k] for k in names}  # no val_accuracy: a regression's
    written = json.loads((result.run_dir / "results.json").read_text())["best"]
    assert written == dict(best) and written["val_r2"] == rung["val_r2"]
    assert packexp.load(result.run_dir).best == best
    logged = MlflowClient(f"sqlite:///{store / 'mlflow.db'}").get_run(
        result.mlflow_run_id).data.metrics
    assert {k: logged[f"best_{k}"] for k in names} == pytest.approx({k: rung[k] for k in names})
