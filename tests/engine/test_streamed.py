"""Streamed image folders (``dataset.cache=none``): read once per pack, isolation kept.

A member trained in a pack on a stream ends bit for bit where it ends alone: the epoch's
order is the dataset's, each member takes its rows at its own batch size, and blocks are cut
wherever the pack's reads fall."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packexp.data import Dataset, image_folder
from packexp.data.streamed import StreamedImages
from packexp.errors import ConfigError
from packexp.packing import Evaluation, Member, Pack
from packexp.packing.data import Preprocessing, StreamData, device_data
from packexp.space import Trial, derive_seed
from packexp.space.options import PackSettings
from packexp.testing.data import photo_folder
from packexp.testing.members import PLAIN, assert_same_weights
from packexp.testing.models import small_cnn

pytestmark = pytest.mark.tf

TRIALS = [  # misaligned: 48 training images, 6, 4 and 9 steps per epoch
    Trial("t0", {"batch_size": 8, "optimizer": "adam", "learning_rate": 1e-3,
                 "activation": "relu"}, (), seed=derive_seed(5, 0)),
    Trial("t1", {"batch_size": 12, "optimizer": "momentum", "learning_rate": 1e-2,
                 "activation": "tanh"}, (), seed=derive_seed(5, 1)),
    Trial("t2", {"batch_size": 5, "optimizer": "sgd", "learning_rate": 1e-2,
                 "activation": "relu"}, (), seed=derive_seed(5, 2)),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return photo_folder(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def stream(folder) -> StreamedImages:
    # blocks of 7: no batch size divides them, so every member's rows straddle blocks
    return image_folder.load(str(folder), image_size=[12, 12], val_fraction=0.2, seed=3,
                             cache="none", block=7)


def train(data, trials, epochs=2, preprocessing=None):
    ds = data.dataset
    members = [Member.create(t, small_cnn, ds.input_shape, ds.num_classes, data.train_size,
                             preprocessing) for t in trials]
    pack = Pack(members, data, PackSettings(**PLAIN))
    pack.train({m.trial_id: m.steps_for(epochs) for m in members})
    return members, pack.evaluate()


def test_a_streamed_folder_holds_paths_and_labels_not_pixels(stream):
    assert isinstance(stream, StreamedImages)
    assert (stream.train_size, stream.val_size) == (48, 12)
    assert stream.input_shape == (12, 12, 3)
    assert sorted(np.bincount(stream.y_train)) == [16, 16, 16]
    assert isinstance(device_data(stream), StreamData)


def test_an_epochs_blocks_are_its_order_decoded(stream):
    order = stream.order(1)
    assert sorted(order) == list(range(48))
    assert not np.array_equal(order, stream.order(2))  # each epoch its own order
    blocks = list(stream.train_blocks(1, 5, 30))
    assert [int(x.shape[0]) for x, _ in blocks] == [7, 7, 7, 4]
    labels = np.concatenate([y.numpy() for _, y in blocks])
    np.testing.assert_array_equal(labels, stream.y_train[order[5:30]])
    images = np.concatenate([x.numpy() for x, _ in blocks])
    assert images.dtype == np.uint8 and images.shape == (25, 12, 12, 3)
    # each image's own colour channel is the bright one, whatever its size was on disk
    brightest = images.reshape(25, -1, 3).mean(axis=1).argmax(axis=1)
    np.testing.assert_array_equal(brightest, labels)


def test_memory_and_stream_split_the_same_images(folder, stream):
    memory = image_folder.load(str(folder), image_size=[12, 12], val_fraction=0.2, seed=3,
                               cache="memory")
    assert memory.train_size == stream.train_size
    np.testing.assert_array_equal(memory.y_train, stream.y_train)
    np.testing.assert_array_equal(memory.y_val, stream.y_val)


@pytest.fixture(scope="module")
def packed(stream):
    return train(StreamData(stream), TRIALS)


@pytest.mark.parametrize("index", range(len(TRIALS)))
def test_a_member_packed_on_a_stream_ends_bit_identical_to_alone(stream, packed, index):
    members, evaluation = packed
    assert [m.step for m in members] == [12, 8, 18]
    [alone], alone_evaluation = train(StreamData(stream), [TRIALS[index]])
    member = members[index]
    assert alone.step == member.step
    assert_same_weights(alone, member)  # BatchNorm statistics and optimizer state included
    assert alone_evaluation[member.trial_id] == evaluation[member.trial_id]
    assert isinstance(evaluation[member.trial_id], Evaluation)
    assert evaluation[member.trial_id].val_accuracy is not None


def test_augmented_members_stay_isolated_on_a_stream(stream):
    augment = Preprocessing(crop_padding=2, flip=True)
    members, evaluation = train(StreamData(stream), TRIALS[:2], epochs=1,
                                preprocessing=augment)
    [alone], alone_evaluation = train(StreamData(stream), [TRIALS[1]], epochs=1,
                                      preprocessing=augment)
    for a, b in zip(alone.model.get_weights(), members[1].model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert alone_evaluation["t1"] == evaluation["t1"]
    plain, _ = train(StreamData(stream), [TRIALS[1]], epochs=1)
    assert not all(np.array_equal(a, b) for a, b in
                   zip(plain[0].model.get_weights(), alone.model.get_weights(), strict=True))


def test_training_in_two_calls_equals_one(stream):
    """A rung's budget ending mid-epoch: the next call takes the epoch on from there."""
    whole, _ = train(StreamData(stream), TRIALS[:1], epochs=2)
    ds = stream
    [m] = [Member.create(TRIALS[0], small_cnn, ds.input_shape, ds.num_classes, ds.train_size)]
    pack = Pack([m], StreamData(stream), PackSettings(**PLAIN))
    pack.train({"t0": 5})
    pack.train({"t0": 7})
    assert m.step == 12
    for a, b in zip(whole[0].model.get_weights(), m.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_stream_trains_plain_packs_only(stream):
    ds = stream
    members = [Member.create(t, small_cnn, ds.input_shape, ds.num_classes, ds.train_size)
               for t in TRIALS[:2]]
    pack = Pack(members, StreamData(stream), PackSettings(fusion="on"))
    assert not pack.fused and not pack.looped
    assert "streamed" in pack.program.unfused


class TestBadInput:
    def test_an_unknown_cache_is_one_line(self, folder):
        with pytest.raises(ConfigError, match=r"dataset.cache='disk': must be one of auto"):
            image_folder.load(str(folder), cache="disk")

    def test_an_image_that_is_not_one_names_its_file(self, tmp_path):
        root = photo_folder(tmp_path / "p", per_class=3)
        (root / "class1" / "zz.png").write_bytes(b"not a png at all")
        with pytest.raises(ConfigError, match=r"zz.png: cannot decode image"):
            image_folder.load(str(root), cache="none", val_fraction=0.5)

    def test_a_truncated_image_names_its_file_at_load(self, tmp_path):
        # Before TensorFlow's decoder sees it, which would log a line of its own first
        # (tests/unit/test_data.py: the same without TensorFlow).
        root = photo_folder(tmp_path / "p", per_class=3)
        good = (root / "class0" / "000.jpg").read_bytes()
        (root / "class0" / "zz.jpg").write_bytes(good[: len(good) // 3])
        with pytest.raises(ConfigError, match=r"zz.jpg: cannot decode image \(.*[Tt]runcated"):
            image_folder.load(str(root), cache="none", val_fraction=0.5)

    def test_an_empty_folder_and_a_lone_image_are_refused_as_in_memory(self, tmp_path):
        (tmp_path / "empty").mkdir()
        with pytest.raises(ConfigError, match="no class subfolders"):
            image_folder.load(str(tmp_path / "empty"), cache="none")
        root = photo_folder(tmp_path / "p", per_class=2)
        for f in list((root / "class2").iterdir())[1:]:
            f.unlink()
        with pytest.raises(ConfigError, match="class 'class2' has 1 images"):
            image_folder.load(str(root), cache="none")


def test_workers_read_the_data_as_this_process_chose_to():
    """``cache=auto`` is pinned to this process's choice in the config workers get."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from packexp.config.components import Components

    cfg = OmegaConf.create({"dataset": {"path": "/photos", "cache": "auto"}})
    for streams, pinned in ((True, "none"), (False, "memory")):
        parts = SimpleNamespace(cfg=cfg, dataset=SimpleNamespace(streams=streams))
        assert Components.worker_cfg(parts).dataset.cache == pinned
    assert cfg.dataset.cache == "auto"  # the run's own config stays as given
    fixed = OmegaConf.create({"dataset": {"path": "/photos", "cache": "memory"}})
    assert Components.worker_cfg(SimpleNamespace(cfg=fixed, dataset=None)) is fixed


def test_an_epoch_size_draws_that_many_images_each_epoch(folder, stream):
    short = image_folder.load(str(folder), image_size=[12, 12], val_fraction=0.2, seed=3,
                              cache="auto", block=7, epoch_size=20)
    assert isinstance(short, StreamedImages)  # an epoch size streams, whatever auto says
    assert short.train_size == 20 and short.val_size == stream.val_size
    first, second = short.order(0), short.order(1)
    assert len(set(first)) == 20 and set(first) != set(second)
    assert set(first) <= set(range(48))
    members, evaluation = train(StreamData(short), TRIALS, epochs=2)
    assert [m.step for m in members] == [4, 2, 8]
    [alone], alone_evaluation = train(StreamData(short), [TRIALS[2]], epochs=2)
    for a, b in zip(alone.model.get_weights(), members[2].model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert alone_evaluation["t2"] == evaluation["t2"]


def test_an_epoch_size_in_memory_is_one_line(folder):
    with pytest.raises(ConfigError, match=r"dataset.epoch_size=20: needs a stream"):
        image_folder.load(str(folder), cache="memory", epoch_size=20)
    with pytest.raises(ConfigError, match=r"dataset.epoch_size=0: must be an integer >= 1"):
        image_folder.load(str(folder), cache="none", epoch_size=0)


MEASURE_RSS = """
import resource, sys
from packexp.data import Dataset, image_folder

data = image_folder.load(sys.argv[1], image_size=[128, 128], cache="none", block=32,
                         prefetch=2, parallel=2, val_fraction=0.1)
blocks = data.train_blocks(0, 0, data.train_size)
next(blocks)
first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rows = 32 + sum(int(x.shape[0]) for x, _ in blocks)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(rows, data.decoded_bytes(), (peak - first) * 1024)
"""


@pytest.mark.slow
def test_a_streams_memory_stays_bounded_by_its_blocks_not_the_folder(tmp_path):
    """An epoch of a folder that is 190 MB decoded raises the peak RSS by a few blocks'
    worth at most, measured in a process of its own (its peak is its own)."""
    import subprocess
    import sys

    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(2000):  # small JPEGs on disk, 128x128x3 each decoded
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), np.uint8)).resize(
                (128, 128)).save(tmp_path / f"c{c}" / f"{i}.jpg")
    out = subprocess.run([sys.executable, "-c", MEASURE_RSS, str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout.split()
    rows, decoded, growth = (int(v) for v in out)
    assert rows == 3600 and decoded == 4000 * 128 * 128 * 3  # 197 MB of pixels
    block = 32 * 128 * 128 * 3  # 1.6 MB
    assert growth < 16 * block, f"peak RSS rose {growth / 2**20:.1f} MB over the epoch"


class TestTfrecords:
    @pytest.fixture(scope="class")
    def shards(self, tmp_path_factory) -> Path:
        import tensorflow as tf

        root = tmp_path_factory.mktemp("records")
        photos = photo_folder(root / "photos", per_class=10, size=16)
        files = sorted(photos.rglob("*.*"))
        writers = [tf.io.TFRecordWriter(str(root / f"part-{i}.tfrecord")) for i in range(3)]
        for i, f in enumerate(files):
            feature = {"jpeg": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[f.read_bytes()])), "cls": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[int(f.parent.name[-1]) * 7]))}  # labels 0, 7, 14: three classes
            writers[i % 3].write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())
        for w in writers:
            w.close()
        return root

    def load(self, shards, **kw):
        from packexp.data import tfrecord

        return tfrecord.load(str(shards), image_key="jpeg", label_key="cls",
                             image_size=[10, 10], val_fraction=0.2, seed=1, **kw)

    def test_records_stream_and_decode_into_memory_alike(self, shards):
        stream = self.load(shards, cache="none", block=5)
        assert isinstance(stream, StreamedImages)
        assert (stream.train_size, stream.val_size, stream.num_classes) == (24, 6, 3)
        memory = self.load(shards, cache="memory")
        np.testing.assert_array_equal(memory.y_train, stream.y_train)
        rows = np.concatenate([x.numpy() for x, _ in
                               stream._read(stream.train, np.arange(24), stream.y_train, 5)])
        np.testing.assert_array_equal(memory.x_train, rows)
        brightest = rows.reshape(24, -1, 3).mean(axis=1).argmax(axis=1)
        np.testing.assert_array_equal(brightest, stream.y_train)

    def test_a_member_packed_on_records_ends_as_alone(self, shards):
        stream = self.load(shards, cache="none", block=5)
        trials = [Trial("a", {**TRIALS[0].hparams, "batch_size": 4}, (), seed=1),
                  Trial("b", {**TRIALS[1].hparams, "batch_size": 6}, (), seed=2)]
        members, evaluation = train(StreamData(stream), trials, epochs=2)
        [alone], alone_evaluation = train(StreamData(stream), trials[1:], epochs=2)
        for a, b in zip(alone.model.get_weights(), members[1].model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert alone_evaluation["b"] == evaluation["b"]

    def test_records_of_another_schema_are_one_line_naming_the_key(self, shards):
        from packexp.data import tfrecord

        with pytest.raises(ConfigError, match=r"dataset.image_key=image: .*part-0.tfrecord has "
                           r"no bytes feature 'image'; its records hold: cls \(int64\), jpeg "
                           r"\(bytes\)"):
            tfrecord.load(str(shards))

    def test_a_file_that_is_not_a_tfrecord_is_one_line_naming_it(self, tmp_path):
        from packexp.data import tfrecord

        (tmp_path / "bad.tfrecord").write_bytes(b"\x10" * 40)
        with pytest.raises(ConfigError, match=r"bad.tfrecord: not an uncompressed TFRecord"):
            tfrecord.load(str(tmp_path))
        with pytest.raises(ConfigError, match=r"no TFRecord files"):
            tfrecord.load(str(tmp_path / "nothing-*.tfrecord"))


class TestStreamAugmentation:
    def load(self, folder, **augment):
        return image_folder.load(str(folder), image_size=[12, 12], val_fraction=0.2, seed=3,
                                 block=7, augment=augment)

    def test_an_image_is_augmented_by_its_epoch_and_place_not_by_who_reads_it(self, folder):
        augmented = self.load(folder, flip=True, crop_padding=2)
        assert isinstance(augmented, StreamedImages)  # augmentation makes auto stream
        whole = np.concatenate([x.numpy() for x, _ in augmented.train_blocks(0, 0, 48)])
        # rows 10:30 read on their own, in other blocks, get the same pixels
        part = np.concatenate([x.numpy() for x, _ in augmented.train_blocks(0, 10, 30)])
        np.testing.assert_array_equal(part, whole[10:30])
        assert isinstance(self.load(folder), Dataset)  # unaugmented, it fits: in memory
        stream = image_folder.load(str(folder), image_size=[12, 12], val_fraction=0.2, seed=3,
                                   cache="none", block=7)
        bare = np.concatenate([x.numpy() for x, _ in stream.train_blocks(0, 0, 48)])
        changed = [not np.array_equal(a, b) for a, b in zip(whole, bare, strict=True)]
        assert sum(changed) >= 24  # crops move most images, flips about half
        epoch1 = np.concatenate([x.numpy() for x, _ in augmented.train_blocks(1, 0, 48)])
        assert not np.array_equal(np.sort(epoch1, axis=None), np.sort(whole, axis=None))
        # validation is never augmented
        for (a, _), (b, _) in zip(augmented.val_blocks(5), stream.val_blocks(5), strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())

    def test_members_on_an_augmented_stream_stay_isolated(self, folder):
        augmented = self.load(folder, flip=True, crop_padding=1)
        members, evaluation = train(StreamData(augmented), TRIALS[:2], epochs=1)
        [alone], alone_evaluation = train(StreamData(augmented), [TRIALS[0]], epochs=1)
        for a, b in zip(alone.model.get_weights(), members[0].model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert alone_evaluation["t0"] == evaluation["t0"]

    def test_bad_augmentation_keys_are_one_line(self, folder):
        with pytest.raises(ConfigError, match=r"dataset.augment.rotate: unknown"):
            self.load(folder, rotate=10)
        with pytest.raises(ConfigError, match=r"dataset.augment.crop_padding=-1: must be"):
            self.load(folder, crop_padding=-1)
        with pytest.raises(ConfigError, match=r"dataset.augment: augments a stream"):
            image_folder.load(str(folder), cache="memory", augment={"flip": True})


class TestPipelines:
    """``packexp.tune(data=tf.data.Dataset)``: written once as TFRecords of tensors in the run
    directory, then streamed as ``dataset=tfrecord`` streams them."""

    @staticmethod
    def pipelines():
        import tensorflow as tf
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.data.astype(np.float32) / 16.0, digits.target
        train = tf.data.Dataset.from_tensor_slices((x[:1400], y[:1400])).batch(100)
        return train, tf.data.Dataset.from_tensor_slices((x[1400:], y[1400:]))

    def test_a_pair_of_pipelines_is_searched_by_stream_and_resumes(self, tmp_path):
        import packexp

        train, val = self.pipelines()
        kwargs = {"experiment": "quick", "strategy": "knn", "run_dir": tmp_path / "run",
                  "dataset": {"cache": "none", "block": 300}}
        stopped = packexp.tune(data=(train, val), budget={"trials": 2}, **kwargs)
        records = tmp_path / "run" / "records"
        assert sorted(p.name for p in (records / "train").iterdir()) == [
            "part-00000.tfrecord", "tensors.json"]
        written = (records / "train" / "part-00000.tfrecord").stat().st_mtime_ns
        assert len(stopped.trials) <= 3
        with pytest.raises(ConfigError, match="holds a run already"):
            packexp.tune(data=(train, val), **kwargs)
        result = packexp.tune(data=(train, val), resume=True, budget={"trials": None},
                              **kwargs)
        assert len(result.trials) > len(stopped.trials)
        assert (records / "train" / "part-00000.tfrecord").stat().st_mtime_ns == written
        assert result.best_value > 0.5  # digits' features learnt from the stream

    def test_one_pipeline_is_split_and_bad_ones_are_one_line(self, tmp_path):
        import tensorflow as tf

        from packexp.data import tfrecord

        train, _ = self.pipelines()
        n = tfrecord.write(train, tmp_path / "one")
        data = tfrecord.load(str(tmp_path / "one"), image_key="x", label_key="y",
                             cache="none", val_fraction=0.2)
        assert n == 1400 and data.input_shape == (64,) and data.dtype == "float32"
        assert (data.train_size, data.val_size, data.num_classes) == (1120, 280, 10)
        memory = tfrecord.load(str(tmp_path / "one"), image_key="x", label_key="y",
                               cache="memory", val_fraction=0.2)
        assert memory.x_train.dtype == np.float32 and memory.x_train.shape == (1120, 64)
        floats = tf.data.Dataset.from_tensor_slices((np.zeros((4, 3)), np.zeros(4)))
        with pytest.raises(ConfigError, match="labels must be integer classes"):
            tfrecord.write(floats, tmp_path / "bad")
        with pytest.raises(ConfigError, match=r"a tf.data.Dataset of \(x, y\) pairs"):
            tfrecord.write(tf.data.Dataset.range(3), tmp_path / "bad2")


class TestTables:
    """``dataset=table`` streamed (``cache=none``): Parquet row groups and CSV files read a
    group at a time, in an order of the seed and the epoch."""

    @pytest.fixture(scope="class")
    def tables(self, tmp_path_factory):
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        root = tmp_path_factory.mktemp("tables")
        rng = np.random.default_rng(0)
        x = rng.normal(size=(300, 5))
        y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int) + (x[:, 2] > 1)
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(5)]).assign(label=y)
        (root / "pq").mkdir()
        for name, rows in (("a", frame.iloc[:200]), ("b", frame.iloc[200:])):
            pq.write_table(pa.Table.from_pandas(rows, preserve_index=False),
                           root / "pq" / f"{name}.parquet", row_group_size=64)
        (root / "csv").mkdir()
        for i, lo in enumerate(range(0, 300, 120)):
            frame.iloc[lo:lo + 120].to_csv(root / "csv" / f"part{i}.csv", index=False)
        frame.to_csv(root / "whole.csv", index=False)
        return root

    def load(self, path, **kw):
        from packexp.data import table

        return table.load(str(path), target="label", val_fraction=0.2, seed=2, **kw)

    @pytest.mark.parametrize("shards", ["pq", "csv"])
    def test_shards_stream_a_group_at_a_time_as_memory_reads_them(self, tables, shards):
        from packexp.data.shards import StreamedTable

        stream = self.load(tables / shards, cache="none", block=50)
        assert isinstance(stream, StreamedTable)
        assert len(stream.groups) == (6 if shards == "pq" else 3)  # 4 + 2 row groups
        assert (stream.train_size, stream.val_size, stream.num_classes) == (240, 60, 3)
        order = stream.order(0)
        assert sorted(order) == sorted(stream.train_rows)
        assert not np.array_equal(order, stream.order(1))
        memory = self.load(tables / "whole.csv", cache="memory")
        assert sorted(memory.y_train) == sorted(stream.y_train)
        # the same rows standardised by the same training split's moments
        mine = np.concatenate([x.numpy() for x, _ in stream.train_blocks(0, 0, 240)])
        labels = np.concatenate([y.numpy() for _, y in stream.train_blocks(0, 0, 240)])
        np.testing.assert_array_equal(labels, stream.y[order])
        np.testing.assert_allclose(np.sort(mine, axis=0), np.sort(memory.x_train, axis=0),
                                   rtol=1e-5, atol=1e-5)

    def test_a_member_packed_on_a_streamed_table_ends_as_alone(self, tables):
        from packexp.testing.members import members as make_members

        data = StreamData(self.load(tables / "pq", cache="none", block=37))
        configs = [(0, (8, "adam", 1e-2, "relu")), (1, (20, "momentum", 1e-2, "tanh"))]
        packed = make_members(data, configs)
        pack = Pack(packed, data, PackSettings(**PLAIN))
        pack.train({m.trial_id: m.steps_for(2) for m in packed})
        [alone] = make_members(data, configs[1:])
        single = Pack([alone], data, PackSettings(**PLAIN))
        single.train({alone.trial_id: alone.steps_for(2)})
        assert alone.step == packed[1].step == 2 * (240 // 20)
        assert_same_weights(alone, packed[1])
        assert single.evaluate()["t1"] == pack.evaluate()["t1"]

    def test_bad_shards_are_one_line_each(self, tables, tmp_path):
        (tmp_path / "mixed").mkdir()
        (tmp_path / "mixed" / "a.csv").write_text("f0,label\n1,0\n")
        (tmp_path / "mixed" / "b.parquet").write_bytes(b"x")
        with pytest.raises(ConfigError, match=r"shards must all be CSV or all Parquet"):
            self.load(tmp_path / "mixed", cache="none")
        (tmp_path / "cols").mkdir()
        (tmp_path / "cols" / "a.csv").write_text("f0,label\n1,0\n2,1\n")
        (tmp_path / "cols" / "b.csv").write_text("g0,label\n1,0\n2,1\n")
        with pytest.raises(ConfigError, match=r"b.csv: its columns differ from a.csv's"):
            self.load(tmp_path / "cols", cache="none")
        from packexp.data import table

        with pytest.raises(ConfigError, match=r"dataset.target=labelx: no such column"):
            table.load(str(tables / "csv"), target="labelx", cache="none")
        with pytest.raises(ConfigError, match=r"3 shards are streamed"):
            self.load(tables / "csv", cache="memory")

    def test_a_streamed_regression_is_scored_as_one_in_memory(self, tmp_path):
        import pandas as pd
        from sklearn.datasets import make_friedman1

        from packexp.testing.members import members as make_members

        x, y = make_friedman1(n_samples=400, noise=1.0, random_state=0)
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(10)]).assign(target=y)
        (tmp_path / "f").mkdir()
        for i in range(2):
            frame.iloc[i * 200:(i + 1) * 200].to_csv(tmp_path / "f" / f"{i}.csv", index=False)
        from packexp.data import table

        stream = table.load(str(tmp_path / "f"), target="target", regression=True,
                            cache="none", block=64)
        assert stream.regression and stream.y.dtype == np.float32
        data = StreamData(stream)
        packed = make_members(data, [(0, (16, "adam", 1e-2, "relu"))])
        pack = Pack(packed, data, PackSettings(**PLAIN))
        pack.train({m.trial_id: m.steps_for(3) for m in packed})
        scored = pack.evaluate()["t0"]
        assert scored.val_mse is not None and scored.val_r2 is not None
        assert scored.val_accuracy is None and scored.val_mse == scored.val_loss

    def test_a_member_that_diverges_leaves_its_pack_mates_as_alone(self, tables):
        from packexp.testing.members import members as make_members

        data = StreamData(self.load(tables / "pq", cache="none", block=37))
        configs = [(0, (8, "sgd", 1e12, "relu")), (1, (20, "momentum", 1e-2, "tanh"))]
        packed = make_members(data, configs)
        Pack(packed, data, PackSettings(**PLAIN)).train(
            {m.trial_id: m.steps_for(2) for m in packed})
        assert packed[0].failed and not packed[1].failed
        [alone] = make_members(data, configs[1:])
        Pack([alone], data, PackSettings(**PLAIN)).train({alone.trial_id: alone.steps_for(2)})
        assert_same_weights(alone, packed[1])


def test_a_run_records_each_streamed_split_by_a_digest_of_where_it_is(stream, tmp_path):
    """MLflow's dataset inputs of a stream: digests of its files (or rows), not its pixels."""
    import pandas as pd

    from packexp.data import table
    from packexp.tracking.datasets import dataset_splits

    rows = pd.DataFrame({"a": np.arange(40.0), "label": np.arange(40) % 2})
    rows.to_csv(tmp_path / "t.csv", index=False)
    shards = table.load(str(tmp_path / "t.csv"), target="label", cache="none")
    for data, shape in ((stream, (12, 12, 3)), (shards, (1,))):
        train, val = dataset_splits(data)
        assert (train.context, val.context) == ("training", "validation")
        assert train.digest != val.digest
        assert train.features == ("|u1" if len(shape) == 3 else "<f4", (data.train_size, *shape))
        assert dataset_splits(data) == [train, val]


@pytest.mark.search
def test_a_streamed_search_packed_by_knn_scores_every_trial_as_one_alone(folder, tmp_path):
    """The whole search on a streamed folder, MLflow tracking on: strategy=knn's packs and
    strategy=none's singles read the same rows, and so give the same scores."""
    from packexp.testing.searches import search

    common = ["dataset=image_folder", f"dataset.path={folder}", "dataset.image_size=[8,8]",
              "dataset.cache=none", "dataset.block=16", "model=cnn", "model.width=4",
              "scheduler.R=3", "pack.fusion=off", "pack.jit_compile=false",
              "search_space.params.batch_size=[4,6,8]",
              f"tracking.store_dir={tmp_path / 'store'}"]
    scores = {}
    for strategy in ("knn", "none"):
        results = search(tmp_path / strategy, *common, f"strategy={strategy}")
        scores[strategy] = {t["trial_id"]: [(r["epochs"], r["val_accuracy"], r["val_loss"])
                                            for r in t["rungs"]] for t in results["trials"]}
        sizes = [len(p["members"]) for p in results["packs"]]
        assert max(sizes) > 1 if strategy == "knn" else max(sizes) == 1
        assert sum(p["read_s"] for p in results["packs"]) > 0
    assert scores["knn"] == scores["none"]
