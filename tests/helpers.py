"""Helpers the test modules share: the CLI and composed configs, tiny trials, members and
models, a fake device's calibration, and fake dataset files."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from packexp.config import register_resolvers
from packexp.space import Trial, derive_seed

if TYPE_CHECKING:
    import keras

    from packexp.packing import DeviceData, Member
    from packexp.packing.cache import PackCache

# TensorFlow is imported inside the helpers that need it: the modules that never build a
# model, and conftest, import this one without paying for it.

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = str(ROOT / "conf")


def packexp(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "packexp", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def search(run_dir: Path, *overrides: str, strategy: str | None = "knn") -> dict:
    """Runs the search ``overrides`` compose in this process, into ``run_dir``, and returns its
    ``results.json``: a test that needs a search's results, not the command, so pays no
    TensorFlow import in a child. ``run(cfg)`` is what ``python -m packexp`` runs, less what
    Hydra adds around it: the ``.hydra`` files and log, the run directory's checks
    (``RunDirCheck``), the command's overrides in the journal and Hydra's choices in MLflow.
    As ``compose_config``, it runs ``strategy`` (knn) unless the overrides name one or
    ``strategy=None`` (the default, cost), and keeps memory probes in the run directory only.
    The summary goes to stdout, for ``capsys``; the log to ``caplog``."""
    from packexp.app.main import run

    run(compose_config(list(overrides), strategy=strategy), run_dir=run_dir)
    return json.loads((Path(run_dir) / "results.json").read_text())


def search_on_fake(run_dir: Path, *overrides: str, strategy: str | None = "knn",
                   trainer=None) -> dict:
    """``search``, but on ``trainer`` (a ``packexp.testing.FakeTrainer`` that fails no trial
    unless given): the same config, runner, journal, tracker, ``results.json`` and plots in
    milliseconds, for a test whose check is orchestration, not trained numbers. The fake
    refuses ``strategy=cost`` and ``executor=ray``."""
    from packexp.app.main import run
    from packexp.testing.fake_trainer import FakeTrainer

    run(compose_config(list(overrides), strategy=strategy), run_dir=run_dir,
        trainer=FakeTrainer(failing="") if trainer is None else trainer)
    return json.loads((Path(run_dir) / "results.json").read_text())


def search_command(args: list[str]) -> dict:
    """``search`` of a command's arguments (a printed resume line's, say): its
    ``hydra.run.dir=`` is the run directory, the rest are the overrides, and the strategy is
    the one they name or the default, as the command would run."""
    [run_dir] = [a.removeprefix("hydra.run.dir=") for a in args if a.startswith("hydra.run.dir=")]
    return search(Path(run_dir), *[a for a in args if not a.startswith("hydra.run.dir=")],
                  strategy=None)


def compose_config(overrides: list[str] | None = None, *,
                   strategy: str | None = "knn") -> DictConfig:
    """The composed config under ``overrides``: a test's own copy, free to change. Memory
    probes are kept in the run directory only, unless ``overrides`` set ``device.probe_dir``.

    Unless ``overrides`` choose a strategy, tests run ``strategy`` (knn): it packs on every
    device, so the pack engine is exercised wherever the suite runs, where the default
    (cost) may plan only singles and first measures a calibration. ``strategy=None``
    composes the true default."""
    overrides = list(overrides or ())
    if strategy and not any(o.startswith("strategy=") for o in overrides):
        overrides.append(f"strategy={strategy}")
    if not any(o.startswith("device.probe_dir=") for o in overrides):
        overrides.append("device.probe_dir=null")  # no test reads a probe another kept
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    # A composition takes ~0.2 s and tests repeat override lists; callers get copies.
    register_resolvers()  # ${default:}, as python -m packexp and packexp.tune register it
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


CONFIGS = [  # (batch_size, optimizer, learning_rate, activation)
    (20, "adam", 1e-3, "relu"),
    (45, "momentum", 1e-2, "tanh"),
    (70, "adagrad", 1e-2, "sigmoid"),
    (32, "sgd", 1e-1, "leaky_relu"),
]
# The plain pack, traced but not compiled (a run's default is auto for both): the pack the
# isolation invariant holds bit for bit.
PLAIN = {"fusion": "off", "jit_compile": False}


def trial(i: int, batch: int, opt: str, lr: float, act: str) -> Trial:
    hp = {"batch_size": batch, "optimizer": opt, "learning_rate": lr, "activation": act}
    return Trial(f"t{i}", hp, (), seed=derive_seed(11, i))


def members(data: DeviceData, configs, width=32, preprocessing=None) -> list[Member]:
    """mlp3 members of ``width`` units, one per ``(i, config)`` of ``configs``."""
    from packexp.models import mlp3
    from packexp.packing import Member

    build = functools.partial(mlp3.build, width=width)
    ds = data.dataset
    return [Member.create(trial(i, *c), build, ds.input_shape, ds.num_classes,
                          data.train_size, preprocessing) for i, c in configs]


def assert_same_weights(a: Member, b: Member) -> None:
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    for va, vb in zip(a.optimizer.variables, b.optimizer.variables, strict=True):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


def make_cache(data: DeviceData, keep: int, build=None, preprocessing=None,
               **options) -> PackCache:
    from packexp.models import mlp3
    from packexp.packing import Member
    from packexp.packing.cache import PackCache

    build = build or functools.partial(mlp3.build, width=16)
    ds = data.dataset

    def make_member(t):
        return Member.create(t, build, ds.input_shape, ds.num_classes, data.train_size,
                             preprocessing)

    return PackCache(make_member, data, {**PLAIN, "chunk_steps": 7, **options}, keep=keep)


def mlp_with_dropout(input_shape, num_classes, hparams) -> keras.Model:
    """A user's kind of model: its Dropout layer draws random masks in training."""
    import keras

    return keras.Sequential([keras.Input(tuple(input_shape)),
                             keras.layers.Dense(16, activation=hparams["activation"]),
                             keras.layers.Dropout(0.3), keras.layers.Dense(num_classes)])


def every_layer_cnn(input_shape, num_classes, hparams) -> keras.Model:
    """A small CNN with one of each layer the fused graph translates."""
    import keras

    act = hparams["activation"]
    layers = keras.layers
    x = inputs = keras.Input(input_shape)
    x = layers.Rescaling(2.0, offset=-1.0)(x)
    x = layers.ZeroPadding2D(1)(x)
    x = layers.Conv2D(6, 3, strides=2, activation=act)(x)  # bias and activation inside
    x = layers.BatchNormalization()(x)
    a = layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    a = layers.BatchNormalization(momentum=0.9)(a)
    a = layers.Activation(act)(a)
    b = layers.Conv2D(6, 1, use_bias=False)(x)
    b = layers.ReLU(6.0)(b)
    x = layers.Add()([a, b])
    x = layers.Concatenate()([x, layers.Conv2D(4, 1)(x)])
    x = layers.MaxPooling2D(2)(x)
    x = layers.AveragePooling2D(1)(x)
    x = layers.Dropout(0.0)(x)
    w = layers.DepthwiseConv2D(1, depth_multiplier=2)(layers.Cropping2D(1)(x))
    x = layers.Add()([layers.GlobalMaxPooling2D(keepdims=True)(w),  # broadcasts
                      layers.Concatenate()([x, x])])
    skip = layers.GlobalAveragePooling2D()(x)
    flat = layers.Dense(8, activation=act)(layers.Flatten()(x))
    flat = layers.BatchNormalization()(flat)
    x = layers.Concatenate()([skip, flat])
    return keras.Model(inputs, layers.Dense(num_classes)(x))


def all_layers(model: keras.Model) -> list[keras.layers.Layer]:
    return list(model._flatten_layers(include_self=False))


def activation_counts(model: keras.Model) -> Counter[str]:
    """``ReLU`` layers and ``Activation`` layers (by function name) in ``model``, nested too."""
    import keras

    return Counter(
        "ReLU" if isinstance(layer, keras.layers.ReLU) else layer.get_config()["activation"]
        for layer in all_layers(model)
        if isinstance(layer, keras.layers.ReLU | keras.layers.Activation)
    )


def bn_momenta(model: keras.Model) -> set[float]:
    import keras

    return {layer.momentum for layer in all_layers(model)
            if isinstance(layer, keras.layers.BatchNormalization)}


def device(*, plain=(1e-3, 1e-3, 0.0), fused=None, plain_setup=(0.1, 0.05),
           fused_setup=(0.2, 0.01), build_s=0.02, load_s=0.001, fusion="auto",
           call_s=0.0, evaluate=(0.0, 0.0), checkpoint_s=0.0) -> dict:
    """A calibration record of a fake device whose packs follow the given curves exactly."""
    a, c0, c1 = plain
    packs = []
    for n, b in itertools.product((1, 2, 4, 8), (16, 64)):
        packs.append({"fusion": "off", "xla": False, "batches": [b] * n,
                      "step_s": a + n * (c0 + c1 * b), "call_s": call_s,
                      "setup_s": plain_setup[0] + plain_setup[1] * n,
                      "eval_s": evaluate[0] + evaluate[1] * n})
        if fused and n > 1:
            fa, f0, f1 = fused
            packs.append({"fusion": "on", "xla": False, "batches": [b] * n,
                          "step_s": fa + n * (f0 + f1 * b), "call_s": call_s,
                          "setup_s": fused_setup[0] + fused_setup[1] * n,
                          "eval_s": evaluate[0] + evaluate[1] * n})
    return {"packs": packs, "build_s": build_s, "load_s": load_s,
            "checkpoint_s": checkpoint_s, "chunk_steps": 500,
            "settings": {"fusion": fusion, "misaligned": "mask", "data_sharing": "gather",
                         "jit_compile": "auto", "xla_min_steps": 2000,
                         "fusable": bool(fused)}}


def ray_processes(ray_tmp: str) -> list[int]:
    """The processes of the Ray whose files are in ``ray_tmp`` (``RAY_TMPDIR``)."""
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("RAY_TMPDIR") == ray_tmp and p.pid != os.getpid():
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def describe(pids: list[int]) -> list[str]:
    """Each process as ``pid name status cmdline``, for an assertion's message."""
    import psutil

    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} {p.name()} {p.status()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return out


def wait_until(condition, timeout_s: float, every_s: float = 0.2) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


def small_cnn(input_shape, num_classes, hparams, filters=4, momentum=0.7):
    """Convolution, BatchNorm, a runtime activation, a depthwise convolution, pooling."""
    import keras  # here: this module is imported where TensorFlow must not load

    from packexp.models.activation import SelectActivation
    from packexp.models.keras_apps import ACTIVATIONS

    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Conv2D(filters, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization(momentum=momentum)(x)
    x = SelectActivation(ACTIVATIONS, hparams.get("activation", "relu"), relu_max_value=6.0)(x)
    x = keras.layers.DepthwiseConv2D(3)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def free_port() -> int:
    """A loopback port nothing listens on (as the kernel hands it out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kept_models(run_dir: Path) -> dict[str, tuple[str, str]]:
    """The models a search in ``run_dir`` kept (``keep_models``): each trial's file and a
    SHA-256 of its weights, for comparing two runs' kept models exactly."""
    import hashlib

    import keras

    results = json.loads((Path(run_dir) / "results.json").read_text())
    out = {}
    for trial_id, kept in (results.get("models") or {}).items():
        model = keras.saving.load_model(Path(run_dir) / kept["file"])
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes()
                                         for w in model.get_weights())).hexdigest()
        out[trial_id] = (kept["file"], digest)
    return out
