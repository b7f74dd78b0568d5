"""A trained member as a self-contained Keras model: the user's rows in, probabilities (or the
target in its units) out, loadable by plain Keras with no packexp installed.

The saved model is the member's network between standard Keras layers that do what packexp
did around it: ``Normalization`` for the dataset's feature standardisation (``data.Scaling``),
for uint8 images' scaling to [0, 1] and for the trial's ``preprocess`` mean and std; the
network itself, each run-time activation (``SelectActivation``) replaced by the Keras layer
it selected; then ``Softmax`` for a classifier, or an inverted ``Normalization`` for a
regression whose targets were standardised. Each of those layers computes, in float32, the
same operations packexp applied to the data (``(x - mean) / std``, ``x / 255``), so the model
sees exactly the inputs its weights were scored on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np

from packexp.files import naming
from packexp.models.activation import SelectActivation
from packexp.packing.member import Member, MemberState
from packexp.space import Trial

log = logging.getLogger(__name__)

SUFFIX = ".keras"
WEIGHTS_SUFFIX = ".weights.h5"


@dataclass(frozen=True)
class Kept:
    """A kept model's file, relative to the run directory, and whether it is a whole model
    (``.keras``) or, where Keras could not save the model or load its file, its weights only."""

    file: str
    whole: bool = True
    why: str | None = None  # why only the weights were kept


def plain_network(model: keras.Model) -> keras.Model:
    """``model`` with each ``SelectActivation`` replaced by the standard layer it selected,
    the weights copied: the same function, made of layers plain Keras knows."""
    def layer_of(layer: keras.layers.Layer) -> keras.layers.Layer:
        if isinstance(layer, SelectActivation):
            if layer.selected == "relu" and layer.relu_max_value is not None:
                return keras.layers.ReLU(max_value=layer.relu_max_value, name=layer.name)
            return keras.layers.Activation(layer.selected, name=layer.name)
        return layer.__class__.from_config(layer.get_config())

    if not any(isinstance(x, SelectActivation) for x in model._flatten_layers()):
        return model
    clone = keras.models.clone_model(model, clone_function=layer_of, recursive=True)
    clone.set_weights(model.get_weights())
    return clone


def _normalization(mean: Any, std: Any, name: str, invert: bool = False) -> keras.layers.Layer:
    # variance = std², squared in float64 and rounded once: its float32 square root is std
    # again, so the layer divides by exactly the std the data was divided by.
    std64 = np.asarray(std, np.float32).astype(np.float64)
    return keras.layers.Normalization(mean=np.asarray(mean, np.float32), variance=std64 ** 2,
                                      invert=invert, name=name)


def servable(member: Member, data: Any) -> keras.Model:
    """The member's network between the layers that take the user's rows and give back
    probabilities or the target's values (the module's docstring).

    Args:
        member: A member holding the trained state.
        data: Its pack's data (``packing.data.DeviceData`` or ``StreamData``).
    """
    dataset, prep = data.dataset, member.preprocessing
    network = plain_network(member.model)
    shape = tuple(dataset.input_shape)
    images = str(getattr(dataset, "dtype", None) or dataset.x_train.dtype) == "uint8"
    inputs = keras.Input(shape, dtype="float32", name="rows")
    x = inputs
    scaling = getattr(dataset, "inputs", None)
    if scaling is not None:
        x = _normalization(scaling.mean, scaling.std, "standardize")(x)
    if images:
        x = _normalization(0.0, 255.0, "rescale")(x)
    if prep.mean is not None or prep.std is not None:
        channels = shape[-1]
        x = _normalization(prep.mean if prep.mean is not None else (0.0,) * channels,
                           prep.std if prep.std is not None else (1.0,) * channels,
                           "preprocess")(x)
    x = network(x)
    targets = getattr(dataset, "targets", None)
    if dataset.regression:
        if targets is not None:
            x = _normalization(targets.mean, targets.std, "target_units", invert=True)(x)
    elif not data.head.custom:
        x = keras.layers.Softmax(name="probabilities")(x)
    return keras.Model(inputs, x, name=f"packexp_{member.trial_id.replace('-', '_')}")


def _rebuilt(model: keras.Model) -> None:
    """Raises ValueError naming the first layer that its config cannot rebuild, if the model
    cannot be rebuilt from its config. A model of Keras's own layers always can: it is not
    rebuilt (40 ms of the default search's end)."""
    layers = list(model._flatten_layers(include_self=False))
    if all(type(x).__module__.startswith("keras.") for x in layers):
        return
    try:
        keras.Model.from_config(model.get_config())
        return
    except Exception as whole:
        error = whole
    for layer in sorted(layers, key=lambda x: isinstance(x, keras.Model)):  # leaves first
        kind = type(layer)
        try:
            kind.from_config(layer.get_config())
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(f"layer {layer.name!r} ({kind.__module__}.{kind.__qualname__}) "
                             f"cannot be rebuilt from its get_config(): {first}") from e
    raise ValueError(str(error)) from error


def save_atomically(model: keras.Model, path: Path) -> None:
    """Saves ``model`` to ``path`` (``.keras``): a reader finds the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{SUFFIX}")  # Keras wants the suffix
    try:
        with naming(path):
            model.save(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def export_member(trial: Trial, state: MemberState, make_member: Callable[[Trial], Member],
                  data: Any, run_dir: Path, directory: str = "models",
                  name: str | None = None) -> Kept:
    """Writes ``trial``'s model in ``state`` to ``<run_dir>/<directory>/<name>.keras``
    (``name``: the trial's id unless given; a refit's is ``refit``), and loads the file back
    as a reader would (``keras.saving.load_model``: 75 ms for mlp3).

    A model Keras cannot save whole (a custom layer without ``get_config``), or whose saved
    file it cannot load (a ``Lambda`` layer of a Python lambda, refused by Keras's safe
    mode), keeps its weights instead (``.weights.h5``, ``model.save_weights``) and the
    reason, said in one line with the way to build it again; no ``.keras`` file is left.
    """
    member = make_member(trial)
    member.put_state(state)
    stem = name or trial.trial_id
    relative = Path(directory) / f"{stem}{SUFFIX}"
    # What gives it back: a trial's model by its id; a named one (refit) by its own method.
    loader = f"model({trial.trial_id!r})" if name is None else f"{name}_model()"
    try:
        model = servable(member, data)
        # Keras saves a layer whose config cannot rebuild it (a custom layer's constructor
        # argument missing from get_config) and fails only when the file is loaded: rebuild
        # the model from its config first, as loading it would, to name the layer.
        _rebuilt(model)
        save_atomically(model, run_dir / relative)
    except Exception as e:
        return _weights_only(member, run_dir, relative, loader, f"cannot save it: {_why(e)}")
    try:
        keras.saving.load_model(run_dir / relative)
    except Exception as e:
        (run_dir / relative).unlink(missing_ok=True)
        return _weights_only(member, run_dir, relative, loader,
                             f"cannot load the file it saved: {_why(e)}")
    return Kept(relative.as_posix())


def from_weights(trial: Trial, weights: Path, make_member: Callable[[Trial], Member],
                 data: Any) -> keras.Model:
    """The model ``export_member`` would have saved whole, of a member built for ``trial``
    holding the weights it kept instead (``weights``, a ``.weights.h5`` file)."""
    member = make_member(trial)
    member.model.load_weights(weights)
    return servable(member, data)


def _why(error: Exception) -> str:
    """``error``'s message on one line, to its first sentence (Keras adds advice after)."""
    text = " ".join(str(error).split())
    return text.split(". ", 1)[0][:300] or type(error).__name__


def _weights_only(member: Member, run_dir: Path, relative: Path, loader: str,
                  why: str) -> Kept:
    """Keeps the member's network's weights where its ``.keras`` file would be, as
    ``.weights.h5``, and says so in one line: why, and how to build it again (``loader``:
    the ``SearchResult`` method that does)."""
    weights = relative.with_name(relative.name.removesuffix(SUFFIX) + WEIGHTS_SUFFIX)
    (run_dir / weights).parent.mkdir(parents=True, exist_ok=True)
    member.model.save_weights(run_dir / weights)
    reason = f"Keras {why}"
    log.warning("models: %s's model is kept as weights only, in %s (%s); "
                "packexp.load(run_dir).%s builds it again where its builder imports, or "
                "build it with your builder and call model.load_weights(path) "
                "(docs/models.md, \"What is kept\")", member.trial_id, weights, reason, loader)
    return Kept(weights.as_posix(), whole=False, why=reason)
