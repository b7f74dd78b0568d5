"""Contract tests over every model in conf/model/ and every dataset in conf/dataset/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
import numpy as np
import pytest
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from packexp.config import fit_dataset_to_model, instantiate
from packexp.data import Dataset
from packexp.errors import ConfigError
from packexp.models import needs_images
from packexp.testing.config import CONF_DIR, compose_config
from packexp.testing.data import (
    FAKE_TABLE_TARGET,
    fake_arrays,
    fake_cifar10,
    fake_image_folder,
    fake_table,
    fake_tfrecords,
)
from packexp.testing.models import activation_counts, bn_momenta

if TYPE_CHECKING:  # the model contract (marked tf) imports Keras; the dataset one needs none
    import keras

MODELS = sorted(p.stem for p in Path(CONF_DIR, "model").glob("*.yaml"))
DATASETS = sorted(p.stem for p in Path(CONF_DIR, "dataset").glob("*.yaml"))
FILE_DATASETS = [name for name in DATASETS
                 if "path" in OmegaConf.load(Path(CONF_DIR, "dataset", f"{name}.yaml"))]

# Digits' images: the keras.applications models take them, resized up to their smallest (32).
IMAGE_SHAPE, FEATURE_SHAPE = [8, 8, 1], [12]
BATCH, NUM_CLASSES, SEED = 3, 5, 7
# Hyperband scores after rungs as short as one epoch; see bn_momentum in conf/model/.
SHORT_RUNG_MOMENTUM = 0.7


def test_every_model_and_dataset_config_is_found():
    assert {"mlp3", "mobilenet", "resnet50", "densenet121"} <= set(MODELS)
    assert {"digits", "synthetic", "cifar10", "image_folder", "mnist1d", "arrays",
            "table", "tfrecord"} <= set(DATASETS)


def example_batch(shape: list[int]) -> np.ndarray:
    return np.random.default_rng(0).random((BATCH, *shape), dtype=np.float32)


def logits(model: keras.Model, shape: list[int]) -> np.ndarray:
    # As the runner evaluates: a call that leaves out training moves the BatchNorm statistics
    # of a keras.applications model nested in its resizing one.
    import keras

    return keras.ops.convert_to_numpy(model(example_batch(shape), training=False))


class ModelConfig:
    """A model config's builder, the input it takes, and one seeded build per activation."""

    def __init__(self, name: str):
        self.node = compose_config([f"model={name}"]).model
        self.build = instantiate(self.node, "model")
        self.input_shape = IMAGE_SHAPE if needs_images(self.build) else FEATURE_SHAPE
        self._built: dict[str, keras.Model] = {}

    def fresh(self, activation: str) -> keras.Model:
        import keras

        keras.utils.set_random_seed(SEED)
        return self.build(self.input_shape, NUM_CLASSES, {"activation": activation})

    def built(self, activation: str) -> keras.Model:
        # The large CNNs take seconds to build: the module's tests share one of each.
        if activation not in self._built:
            self._built[activation] = self.fresh(activation)
        return self._built[activation]


@pytest.fixture(scope="module", params=MODELS)
def model(request) -> ModelConfig:
    return ModelConfig(request.param)


@pytest.mark.tf
class TestModelContract:
    def test_maps_a_batch_to_logits(self, model):
        out = logits(model.built("tanh"), model.input_shape)
        assert out.shape == (BATCH, NUM_CLASSES)
        assert np.isfinite(out).all()
        assert not np.allclose(out.sum(axis=1), 1.0)  # not probabilities

    @pytest.mark.parametrize("activation", ["relu", "tanh"])  # the network's own; swapped in
    def test_the_same_seed_gives_the_same_initial_weights(self, model, activation):
        first, again = model.built(activation).get_weights(), model.fresh(activation).get_weights()
        assert len(first) == len(again) > 0
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a, b)

    def test_honours_the_activation(self, model):
        relu, tanh = model.built("relu"), model.built("tanh")
        counts = activation_counts(tanh)
        assert counts["tanh"] == sum(activation_counts(relu)[k] for k in ("ReLU", "relu"))
        assert not {"ReLU", "relu"} & counts.keys()
        # Relative only: a deep CNN's untrained logits can be ~1e-9 at inference.
        assert not np.allclose(logits(relu, model.input_shape), logits(tanh, model.input_shape),
                               atol=0)

    def test_refuses_an_unknown_activation_naming_itself(self, model):
        with pytest.raises(ValueError, match=r"^activation='gelu': \S+ knows \[") as info:
            model.build(model.input_shape, NUM_CLASSES, {"activation": "gelu"})
        named = re.match(r"activation='gelu': (\S+) knows", str(info.value)).group(1)
        assert model.built("relu").name.startswith(named)

    def test_takes_feature_vectors_unless_it_needs_images(self, model):
        """``needs_images`` tells a dataset with ``images: auto`` what to give the model; an
        image model refuses feature vectors naming the shape and itself."""
        if not needs_images(model.build):
            out = logits(model.build(FEATURE_SHAPE, NUM_CLASSES, {"activation": "relu"}),
                         FEATURE_SHAPE)
            assert out.shape == (BATCH, NUM_CLASSES)
            return
        with pytest.raises(ValueError, match=r"^input_shape=\[12\]: \S+ needs images "
                                             r"\[height, width, channels\]") as info:
            model.build(FEATURE_SHAPE, NUM_CLASSES, {"activation": "relu"})
        named = re.match(r"input_shape=\[12\]: (\S+) needs", str(info.value)).group(1)
        assert model.built("relu").name.startswith(named)

    @pytest.mark.parametrize("activation", ["relu", "tanh"])
    def test_batchnorm_layers_take_the_configs_momentum(self, model, activation):
        momenta = bn_momenta(model.built(activation))
        if momenta:
            assert momenta == {model.node.bn_momentum} == {SHORT_RUNG_MOMENTUM}
        else:
            assert "bn_momentum" not in model.node  # a key that would reach nothing


# Where a dataset made in code (mnist1d) keeps what it made: the test's own folder.
CACHE = "cache_dir"


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    """A tiny fake of each dataset read from disk, by config name."""
    root = tmp_path_factory.mktemp("data")
    return {"cifar10": fake_cifar10(root).tar, "image_folder": fake_image_folder(root / "images"),
            "arrays": fake_arrays(root / "arrays.npz"), "table": fake_table(root / "table.csv"),
            CACHE: root / "made"}



# The keys besides dataset.path that a dataset read from disk needs to read its fake.
DATA_FILE_KEYS = {"table": {"target": FAKE_TABLE_TARGET}}


def load(name: str, data_files: dict[str, Path]) -> Dataset:
    """The dataset ``name`` as the runner loads it, at ``SEED``, from its fake file if any."""
    cfg = compose_config([f"dataset={name}", f"seed={SEED}"])
    if name == "tfrecord" and name not in data_files:  # written by TensorFlow: made if asked
        data_files[name] = fake_tfrecords(data_files[CACHE].parent / "records")
    if "path" in cfg.dataset:
        if name not in data_files:
            pytest.fail(f"dataset={name} reads dataset.path: give it a fake in data_files")
        cfg.dataset.path = str(data_files[name])
        for key, value in DATA_FILE_KEYS.get(name, {}).items():
            cfg.dataset[key] = value
    if CACHE in cfg.dataset:
        cfg.dataset[CACHE] = str(data_files[CACHE])
    fit_dataset_to_model(cfg)
    return instantiate(cfg.dataset, "dataset")


@pytest.fixture(scope="module", params=[  # TFRecords are read by TensorFlow
    pytest.param(name, marks=pytest.mark.tf) if name == "tfrecord" else name
    for name in DATASETS])
def dataset_name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def dataset(dataset_name, data_files) -> Dataset:
    return load(dataset_name, data_files)


class TestDatasetContract:
    def test_gives_train_and_validation_arrays(self, dataset):
        assert isinstance(dataset, Dataset)
        for x, y in ((dataset.x_train, dataset.y_train), (dataset.x_val, dataset.y_val)):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
            assert y.shape == (len(x),) and len(x) > 0

    def test_gives_images_or_features_of_the_input_shape(self, dataset):
        shape = dataset.input_shape
        assert len(shape) in (1, 3)
        assert dataset.x_val.shape[1:] == shape
        assert dataset.x_train.dtype == dataset.x_val.dtype == (
            np.uint8 if len(shape) == 3 else np.float32)
        assert dataset.y_train.dtype == dataset.y_val.dtype == np.int32

    def test_labels_are_class_indices(self, dataset):
        for y in (dataset.y_train, dataset.y_val):
            assert y.min() >= 0 and y.max() < dataset.num_classes

    def test_the_same_seed_gives_the_same_arrays(self, dataset, dataset_name, data_files):
        again = load(dataset_name, data_files)
        for key in ("x_train", "y_train", "x_val", "y_val"):
            np.testing.assert_array_equal(getattr(again, key), getattr(dataset, key))


@pytest.mark.parametrize("name", FILE_DATASETS)
def test_a_dataset_without_its_file_fails_with_one_line_naming_the_key(name):
    cfg = compose_config([f"dataset={name}"])
    with pytest.raises(InstantiationException) as info:
        hydra.utils.instantiate(cfg.dataset)
    assert isinstance(info.value.__cause__, ConfigError)
    # What the user sees: the runner passes the ConfigError on unchanged.
    with pytest.raises(ConfigError, match=r"^dataset\.path=None: [^\n]*$"):
        instantiate(cfg.dataset, "dataset")
