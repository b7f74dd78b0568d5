"""The file-backed datasets read their formats exactly and name the bad file or key."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import socket
import tarfile
from pathlib import Path
from types import SimpleNamespace

import hydra
import numpy as np
import pytest
from PIL import Image

from packexp.data import cifar10, digits, image_folder
from packexp.errors import ConfigError
from packexp.testing.config import compose_config
from packexp.testing.data import (
    CIFAR_TEST_SIZE,
    CIFAR_TRAIN_PER_BATCH,
    fake_cifar10,
    fake_image_folder,
    py2_pickle,
)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory) -> SimpleNamespace:
    """A tiny CIFAR-10 in the real format, as a folder and as the .tar.gz, with its arrays."""
    return fake_cifar10(tmp_path_factory.mktemp("cifar"))


def _copy_folder(cifar: SimpleNamespace, tmp_path: Path) -> Path:
    return Path(shutil.copytree(cifar.folder, tmp_path / "cifar-10-batches-py"))


class TestCifar10:
    @pytest.mark.parametrize("where", ["tar", "folder", "root"])
    def test_every_form_of_the_archive_loads_the_same_arrays(self, cifar, where):
        reference = cifar10.load(str(cifar.tar))
        data = cifar10.load(str(getattr(cifar, where)))
        for key in ("x_train", "y_train", "x_val", "y_val"):
            np.testing.assert_array_equal(getattr(data, key), getattr(reference, key))
        np.testing.assert_array_equal(data.y_train, cifar.y_train)
        np.testing.assert_array_equal(data.y_val, cifar.arrays["test_batch"][1])

    def test_shapes_and_dtypes(self, cifar):
        data = cifar10.load(str(cifar.tar))
        assert data.name == "cifar10"
        assert data.num_classes == 10
        assert data.x_train.shape == (5 * CIFAR_TRAIN_PER_BATCH, 32, 32, 3)
        assert data.x_val.shape == (CIFAR_TEST_SIZE, 32, 32, 3)
        assert data.x_train.dtype == data.x_val.dtype == np.uint8
        assert data.y_train.dtype == data.y_val.dtype == np.int32
        assert data.input_shape == (32, 32, 3)

    def test_channel_major_rows_become_height_width_channel(self, cifar, tmp_path):
        folder = _copy_folder(cifar, tmp_path)
        data, labels = cifar.arrays["data_batch_1"]
        row = np.zeros(3072, np.uint8)
        # (channel, row, col) -> value; each plane is 1024 bytes of 32 rows of 32.
        pattern = {(0, 0, 1): 11, (1, 2, 5): 22, (2, 31, 30): 33, (0, 7, 0): 44}
        for (c, r, col), value in pattern.items():
            row[c * 1024 + r * 32 + col] = value
        py2_pickle({"labels": labels, "data": np.vstack([row, data[1:]])},
                   folder / "data_batch_1")
        image = cifar10.load(str(folder)).x_train[0]
        expected = np.zeros((32, 32, 3), np.uint8)
        for (c, r, col), value in pattern.items():
            expected[r, col, c] = value
        np.testing.assert_array_equal(image, expected)

    @pytest.mark.parametrize("where", [None, "nothing.tar.gz", "empty_folder"])
    def test_missing_data_names_the_key_and_the_download_page_and_fetches_nothing(
        self, tmp_path, monkeypatch, where
    ):
        def no_network(*args):
            raise AssertionError("tried to connect")

        monkeypatch.setattr(socket.socket, "connect", no_network)
        (tmp_path / "empty_folder").mkdir()
        before = sorted(os.listdir(tmp_path))
        path = None if where is None else str(tmp_path / where)
        with pytest.raises(ConfigError, match=r"^dataset\.path=") as info:
            cifar10.load(path)
        message = str(info.value)
        assert "https://www.cs.toronto.edu/~kriz/cifar.html" in message
        assert "\n" not in message
        assert sorted(os.listdir(tmp_path)) == before

    @pytest.mark.parametrize("damage", ["truncated", "not_gzip"])
    def test_a_corrupt_tar_names_the_file(self, cifar, tmp_path, damage):
        good = cifar.tar.read_bytes()
        bad = tmp_path / "cifar-10-python.tar.gz"
        noise = np.random.default_rng(5000).bytes(5000)
        bad.write_bytes(good[: len(good) // 2] if damage == "truncated" else noise)
        self._assert_corrupt(str(bad), bad)

    def test_a_corrupt_pickle_in_the_tar_names_the_file_and_member(self, cifar, tmp_path):
        folder = _copy_folder(cifar, tmp_path)
        (folder / "data_batch_3").write_bytes(np.random.default_rng(3000).bytes(3000))
        bad = tmp_path / "bad.tar.gz"
        with tarfile.open(bad, "w:gz") as t:
            t.add(folder, arcname="cifar-10-batches-py")
        message = self._assert_corrupt(str(bad), bad)
        assert "cifar-10-batches-py/data_batch_3" in message

    @pytest.mark.parametrize(
        ("content", "reason"),
        [
            (np.random.default_rng(3000).bytes(3000), ""),
            (pickle.dumps({b"labels": [1], b"data": np.zeros((1, 100), np.uint8)}), "3072"),
            (pickle.dumps({b"labels": [1, 2]}), "data"),
            (pickle.dumps(os.system), "unexpected object"),
        ],
        ids=["random_bytes", "wrong_size", "no_data", "foreign_object"],
    )
    def test_a_corrupt_batch_file_names_it(self, cifar, tmp_path, content, reason):
        folder = _copy_folder(cifar, tmp_path)
        (folder / "data_batch_3").write_bytes(content)
        message = self._assert_corrupt(str(folder), folder / "data_batch_3")
        assert reason in message

    def test_a_missing_batch_file_is_named(self, cifar, tmp_path):
        folder = _copy_folder(cifar, tmp_path)
        (folder / "data_batch_5").unlink()
        self._assert_corrupt(str(folder), folder / "data_batch_5")

    @staticmethod
    def _assert_corrupt(path: str, file: Path) -> str:
        with pytest.raises(ConfigError, match=rf"^dataset\.path: {re.escape(str(file))}: "
                                              "not a valid CIFAR-10 python archive") as info:
            cifar10.load(path)
        assert "\n" not in str(info.value)
        return str(info.value)

    def test_val_fraction_splits_the_training_batches_by_seed(self, cifar):
        a, b, c = (cifar10.load(str(cifar.folder), val_fraction=0.2, seed=s) for s in (1, 1, 2))
        assert (len(a.x_train), len(a.x_val)) == (40, 10)
        for key in ("x_train", "y_train", "x_val", "y_val"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
        assert not np.array_equal(a.y_val, c.y_val) or not np.array_equal(a.x_val, c.x_val)
        # Stratified: every class keeps its share, 1 of its 5 examples.
        assert sorted(a.y_val.tolist()) == list(range(10))

    def test_limit_keeps_the_first_training_examples(self, cifar):
        full = cifar10.load(str(cifar.tar))
        data = cifar10.load(str(cifar.tar), limit=7)
        np.testing.assert_array_equal(data.x_train, full.x_train[:7])
        np.testing.assert_array_equal(data.y_train, full.y_train[:7])
        np.testing.assert_array_equal(data.x_val, full.x_val)

    def test_a_bad_limit_names_the_key(self, cifar):
        with pytest.raises(ConfigError, match=r"^dataset\.limit=0: "):
            cifar10.load(str(cifar.tar), limit=0)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """Three classes ("cat" red, "dog" green, "emu" blue) of four PNG and JPEG files each."""
    return fake_image_folder(tmp_path_factory.mktemp("images"))


class TestImageFolder:
    def test_shapes_and_labels_follow_the_class_folders(self, images):
        data = image_folder.load(str(images), image_size=[8, 12], val_fraction=0.25, seed=0)
        assert data.name == "image_folder"
        assert data.num_classes == 3
        assert data.x_train.shape == (9, 8, 12, 3)
        assert data.x_val.shape == (3, 8, 12, 3)
        assert data.x_train.dtype == np.uint8
        assert data.y_train.dtype == np.int32
        assert sorted(data.y_val.tolist()) == [0, 1, 2]
        for x, y in ((data.x_train, data.y_train), (data.x_val, data.y_val)):
            # Each class is one solid colour: red, green, blue in sorted folder order.
            np.testing.assert_array_equal(x.mean(axis=(1, 2)).argmax(axis=1), y)

    def test_resize_is_height_then_width(self, tmp_path):
        for name in ("left", "right"):
            (tmp_path / name).mkdir()
            for i in range(2):
                image = Image.new("RGB", (20, 10), (0, 0, 0))
                image.paste((255, 255, 255), (10, 0, 20, 10))
                image.save(tmp_path / name / f"{i}.png")
        data = image_folder.load(str(tmp_path), image_size=[4, 6], val_fraction=0.5)
        assert data.x_train.shape == (2, 4, 6, 3)
        assert (data.x_train[:, :, 0] == 0).all()
        assert (data.x_train[:, :, -1] == 255).all()

    def test_the_split_is_deterministic_in_seed(self, images):
        a, b, c = (image_folder.load(str(images), val_fraction=0.25, seed=s) for s in (1, 1, 2))
        for key in ("x_train", "y_train", "x_val", "y_val"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
        assert not np.array_equal(a.x_train, c.x_train)

    def test_a_corrupt_image_names_the_file(self, images, tmp_path):
        folder = Path(shutil.copytree(images, tmp_path / "images"))
        bad = folder / "dog" / "b.png"
        bad.write_bytes(np.random.default_rng(300).bytes(300))
        with pytest.raises(ConfigError, match=rf"^dataset\.path: {re.escape(str(bad))}: "
                                              r"cannot decode image \(") as info:
            image_folder.load(str(folder))
        assert "\n" not in str(info.value)

    @pytest.mark.parametrize("name", ["b.jpg", "a.png"])
    def test_a_truncated_image_to_stream_is_named_at_load(self, images, tmp_path, name):
        """Before TensorFlow's decoder reads it, which logs a line of its own (libjpeg's
        "Premature end of JPEG data") ahead of packexp's."""
        folder = Path(shutil.copytree(images, tmp_path / "images"))
        cut = folder / "dog" / name
        cut.write_bytes(cut.read_bytes()[:-40])
        with pytest.raises(ConfigError, match=rf"^dataset\.path: {re.escape(str(cut))}: cannot "
                                              r"decode image \(.+\)$"):
            image_folder.load(str(folder), cache="none")

    def test_data_past_a_whole_image_s_end_streams(self, images, tmp_path):
        folder = Path(shutil.copytree(images, tmp_path / "images"))
        whole = folder / "dog" / "b.jpg"
        whole.write_bytes(whole.read_bytes() + bytes(4096))  # a camera's trailer
        assert not image_folder.ends_whole(whole)
        assert image_folder.load(str(folder), cache="none").train_size == 9

    @pytest.mark.parametrize("where", [None, "nowhere", "file.png"])
    def test_a_missing_folder_names_the_key(self, tmp_path, where):
        (tmp_path / "file.png").write_bytes(b"")
        path = None if where is None else str(tmp_path / where)
        with pytest.raises(ConfigError, match=r"^dataset\.path=.*: not a folder"):
            image_folder.load(path)

    def test_a_folder_without_class_images_is_reported(self, tmp_path):
        (tmp_path / "cat").mkdir()
        (tmp_path / "cat" / "notes.txt").write_text("")
        with pytest.raises(ConfigError, match=r"^dataset\.path=.*: no class subfolders"):
            image_folder.load(str(tmp_path))

    def test_a_class_with_one_image_is_named(self, images, tmp_path):
        folder = Path(shutil.copytree(images, tmp_path / "images"))
        for name in ("a.png", "b.jpg", "c.png"):
            (folder / "emu" / name).unlink()
        with pytest.raises(ConfigError, match=r"^dataset\.path: class 'emu' has 1 images"):
            image_folder.load(str(folder))

    @pytest.mark.parametrize("size", [[32], [0, 32], "32", 32])
    def test_a_bad_image_size_names_the_key(self, images, size):
        with pytest.raises(ConfigError, match=r"^dataset\.image_size="):
            image_folder.load(str(images), image_size=size)


class TestConfig:
    def test_cifar10_composes_and_instantiates(self, cifar):
        cfg = compose_config(["dataset=cifar10", f"dataset.path={cifar.tar}", "dataset.limit=20",
                              "seed=3"])
        assert cfg.dataset.seed == 3
        data = hydra.utils.instantiate(cfg.dataset)
        assert data.name == "cifar10"
        assert data.x_train.shape == (20, 32, 32, 3)

    def test_image_folder_composes_and_instantiates(self, images):
        cfg = compose_config(["dataset=image_folder", f"dataset.path={images}",
                              "dataset.image_size=[8,8]", "dataset.val_fraction=0.25"])
        data = hydra.utils.instantiate(cfg.dataset)
        assert data.x_train.shape == (9, 8, 8, 3)


class TestDigits:
    @pytest.mark.parametrize(("images", "shape", "dtype"),
                             [(True, (8, 8, 1), np.uint8), (False, (64,), np.float32)])
    def test_images_or_features(self, images, shape, dtype):
        data = digits.load(images=images)
        assert (data.input_shape, data.x_train.dtype) == (shape, dtype)
        assert len(data.x_train) + len(data.x_val) == 1797

    def test_an_unresolved_auto_is_refused_naming_the_key(self):
        with pytest.raises(ValueError, match=r"^images='auto': must be true, false or auto"):
            digits.load(images="auto")
