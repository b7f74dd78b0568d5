"""A trial's seeded initial weights, drawn again without building its Keras model.

``Member.create`` seeds Python's ``random`` with the trial's seed and builds the model; each
random initializer the build constructs takes its own seed from that stream
(``keras.random.make_default_seed``) and draws its weight statelessly from it. Building a
Keras model costs far more than drawing its weights (45 ms against a few for mlp3, seconds
for MobileNetV2), so a structure's weights are drawn again from a template model: the
position of each initializer's seed in the template's stream gives the seed it takes for any
other trial. The pack cache uses a replayer only once it has reproduced a second, independent
build bit for bit; anything it cannot follow (a weight whose initializer it cannot find, an
initializer drawing from a SeedGenerator) raises ValueError, and the structure is built.

A layer that draws at random in training (Dropout) holds a ``SeedGenerator``: its state, a
seed from the same stream and a counter each draw advances, is part of a member's state
(``state_variables``), so a checkpoint continues the draws where they stopped.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from itertools import islice

import keras
import numpy as np

# A weight's initializer is its layer's ``<name>_initializer``, or one of these.
_OTHER_ATTRIBUTES = {"kernel": ("depthwise_initializer",),
                     "depthwise_kernel": ("depthwise_initializer",)}
_MAX_DRAWS = 100_000


def _stream(seed: int) -> Iterator[int]:
    """The seeds ``keras.random.make_default_seed`` draws after ``set_random_seed(seed)``."""
    draws = random.Random(seed)
    while True:
        yield draws.randint(1, int(1e9))


def _draws(seed: int, count: int) -> list[int]:
    return list(islice(_stream(seed), count))


def seed_generators(model: keras.Model) -> list[keras.random.SeedGenerator]:
    """The seed generators of ``model``'s layers (Dropout's), nested models' included."""
    found: dict[int, keras.random.SeedGenerator] = {}
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", ()):
            found.setdefault(id(generator), generator)
    return list(found.values())


def state_variables(model: keras.Model) -> list[keras.Variable]:
    """The variables a member's state holds of its model: its weights, then its seed
    generators' states, which training advances."""
    return [*model.weights, *(g.state for g in seed_generators(model))]


class InitialWeights:
    """Draws the initial weights a fresh build of a structure would have, for any seed.

    Args:
        model: The structure's model, just built after ``keras.utils.set_random_seed(seed)``.
        seed: That seed.
    """

    def __init__(self, model: keras.Model, seed: int) -> None:
        self._recipes: list[tuple[Callable[..., keras.initializers.Initializer], dict,
                                  int | None, tuple, str]] = []
        owners = {id(w): layer for layer in _layers(model) for w in layer.weights}
        initializers = []
        for w in model.weights:
            layer = owners.get(id(w))
            name = w.name.split("/")[-1]
            attributes = (f"{name}_initializer", *_OTHER_ATTRIBUTES.get(name, ()))
            initializer = next((i for a in attributes if isinstance(
                i := getattr(layer, a, None), keras.initializers.Initializer)), None)
            if initializer is None:
                raise ValueError(f"weight {w.path}: no {' or '.join(attributes)} on its layer")
            initializers.append(initializer)
        seeds = [getattr(i, "seed", None) for i in initializers]
        # A generator seeded in its config keeps that seed; one without drew it from the stream.
        generators = [(g.state.numpy(), g.get_config()["seed"] is None)
                      for g in seed_generators(model)]
        drawn = [int(state[0]) if unseeded else None for state, unseeded in generators]
        wanted = {s for s in seeds + drawn if s is not None}
        if any(not isinstance(s, int) for s in wanted):
            raise ValueError("an initializer draws from a SeedGenerator")
        # Follow the trial's stream only as far as the last seed wanted (a few dozen draws;
        # drawing all _MAX_DRAWS up front cost 0.2 s per structure).
        where: dict[int, int] = {}
        missing = set(wanted)
        for i, s in enumerate(islice(_stream(seed), _MAX_DRAWS if missing else 0)):
            where.setdefault(s, i)
            missing.discard(s)
            if not missing:
                break
        if missing:
            raise ValueError("an initializer's seed is not drawn from the trial's seed")
        self._count = max((where[s] for s in wanted), default=-1) + 1
        for w, initializer, s in zip(model.weights, initializers, seeds, strict=True):
            config = initializer.get_config()
            self._recipes.append((type(initializer).from_config, config,
                                  None if s is None else where[s], tuple(w.shape), w.dtype))
        self._generators = [(state, None if s is None else where[s])
                            for (state, _), s in zip(generators, drawn, strict=True)]

    def replay(self, seed: int) -> tuple[np.ndarray, ...]:
        """The model's ``state_variables`` as a fresh build after ``set_random_seed(seed)``
        has them."""
        stream = _draws(seed, self._count)
        out = []
        for make, config, index, shape, dtype in self._recipes:
            if index is not None:
                config = {**config, "seed": stream[index]}
            out.append(np.asarray(make(config)(shape, dtype=dtype)))
        for state, index in self._generators:  # fresh: the seed, no draws yet
            out.append(state.copy() if index is None
                       else np.array([stream[index], 0], dtype=state.dtype))
        return tuple(out)


def _layers(model: keras.Model) -> list[keras.layers.Layer]:
    out = []
    for layer in model.layers:
        out += _layers(layer) if isinstance(layer, keras.Model) else [layer]
    return out
