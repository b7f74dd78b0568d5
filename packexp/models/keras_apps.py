"""keras.applications CNNs, the class named in YAML: small-image resizing, and the activation
chosen at run time (every ReLU becomes a ``SelectActivation``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packexp.space.options import activation_of

if TYPE_CHECKING:  # Keras is imported where a model is built, not to read a default
    import keras

ACTIVATIONS = ("sigmoid", "leaky_relu", "tanh", "relu")
# keras.applications rejects smaller inputs; build_application resizes up to it.
MIN_SIZE = 32
# Convolutions need [height, width, channels]; a dataset with images: auto gives them.
NEEDS_IMAGES = True
# Hyper-parameters a built model takes at run time: one built model and one traced program
# serve every activation.
RUNTIME_HPARAMS = ("activation",)


def build(
    input_shape: Sequence[int],
    num_classes: int,
    hparams: Mapping[str, Any],
    application: str,
    bn_momentum: float | None = None,
    **kwargs: Any,
) -> keras.Model:
    """Builds the keras.applications model ``application`` returning logits.

    Args:
        input_shape: Shape of one image, ``[height, width, channels]``.
        num_classes: Width of the logits.
        hparams: Uses ``activation``, which replaces every ReLU.
        application: A ``keras.applications`` class name, such as ``ResNet50``.
        bn_momentum: Momentum of the BatchNorm moving statistics; None keeps Keras's own.
        **kwargs: Passed to the class (e.g. MobileNetV2's ``alpha``).

    Returns:
        The model.
    """
    import keras

    app_fn = getattr(keras.applications, application, None)
    if not callable(app_fn):
        raise ValueError(f"application={application!r}: not a keras.applications model")
    return build_application(app_fn, input_shape, num_classes,
                             activation_of(hparams), MIN_SIZE,
                             bn_momentum=bn_momentum, **kwargs)


def _relu_cap(layer: keras.layers.Layer) -> tuple[bool, float | None]:
    """Whether ``layer`` is a (possibly capped) ReLU, and its cap."""
    import keras

    if isinstance(layer, keras.layers.ReLU):
        config = layer.get_config()
        plain = not config.get("negative_slope") and not config.get("threshold")
        cap = config.get("max_value")
        return plain, None if cap is None else float(cap)
    is_relu = (isinstance(layer, keras.layers.Activation)
               and layer.get_config()["activation"] == "relu")
    return is_relu, None


def replace_activation(model: keras.Model, activation: str) -> keras.Model:
    """Clones ``model`` with every ReLU non-linearity a ``SelectActivation`` of ``ACTIVATIONS``
    holding ``activation`` (``relu`` keeps a capped ReLU's cap: MobileNetV2's ReLU6).

    The clone has freshly initialised weights, drawn from Keras's seeded default seed, so two
    builds after the same ``keras.utils.set_random_seed`` are identical, whatever the
    activation: the activation is runtime data (``RUNTIME_HPARAMS``), not structure. Dense
    layers keep their own ``activation`` argument, so a linear classifier stays linear.

    Args:
        model: A Functional or Sequential model.
        activation: One of ``ACTIVATIONS``.

    Returns:
        The model with ``SelectActivation`` layers in place of its ReLUs, same names.

    Raises:
        ValueError: a layer cannot be cloned from its config (a custom layer without a
            complete ``get_config``); the message names it.
    """
    import keras

    from packexp.models.activation import SelectActivation

    def swap(layer: keras.layers.Layer) -> keras.layers.Layer:
        relu, cap = _relu_cap(layer)
        if relu:
            return SelectActivation(ACTIVATIONS, activation, relu_max_value=cap,
                                    name=layer.name)
        try:
            return layer.__class__.from_config(layer.get_config())
        except Exception as e:  # whatever a custom layer's config methods raise
            raise ValueError(f"activation={activation!r}: layer {layer.name} "
                             f"({type(layer).__name__}) cannot be cloned from its config to "
                             f"replace the activation ({type(e).__name__}: {e}); give it a "
                             "get_config that from_config accepts") from None

    return keras.models.clone_model(model, clone_function=swap, recursive=True)


def set_bn_momentum(model: keras.Model, momentum: float | None) -> keras.Model:
    """Sets the moving-statistics momentum of every BatchNormalization layer in ``model``.

    Args:
        model: Any Keras model, nested models included; it must not have been traced yet.
        momentum: The new momentum, in [0, 1); None leaves each layer's own value.

    Returns:
        ``model``, changed in place.
    """
    import keras

    if momentum is None:
        return model
    if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not 0 <= momentum < 1:
        raise ValueError(f"bn_momentum={momentum!r}: must be a number in [0, 1) or null")
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = float(momentum)
    return model


def build_application(
    app_fn: Callable[..., keras.Model],
    input_shape: Sequence[int],
    num_classes: int,
    activation: str,
    min_size: int,
    bn_momentum: float | None = None,
    **kwargs: Any,
) -> keras.Model:
    """Builds a randomly initialised keras.applications classifier that returns logits.

    Args:
        app_fn: A keras.applications constructor such as ``keras.applications.ResNet50``.
        input_shape: Shape of one example, ``[height, width, channels]``.
        num_classes: Width of the logits.
        activation: One of ``ACTIVATIONS``.
        min_size: Smallest height and width ``app_fn`` accepts; smaller images are upsampled
            by a ``Resizing`` layer inside the model, so on the device during training.
        bn_momentum: Momentum of every BatchNorm layer's moving statistics, which
            evaluation uses; None keeps keras.applications' own (0.999 or 0.99).
        **kwargs: Passed to ``app_fn`` (e.g. MobileNetV2's ``alpha``).

    Returns:
        The model, mapping ``input_shape`` images to ``num_classes`` logits.
    """
    import keras

    name = app_fn.__name__.lower()
    shape = [int(d) for d in input_shape]
    if len(shape) != 3:
        raise ValueError(
            f"input_shape={shape}: {name} needs images [height, width, channels]; "
            "use a dataset with images (e.g. dataset.images=auto for digits)"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: {name} knows {list(ACTIVATIONS)}")
    height, width, channels = shape
    # Only the short side(s) grow, so a large non-square image keeps its aspect ratio.
    app_shape = (max(height, min_size), max(width, min_size), channels)
    app = app_fn(
        weights=None,
        include_top=True,
        classes=num_classes,
        classifier_activation=None,
        input_shape=app_shape,
        **kwargs,
    )
    app = set_bn_momentum(replace_activation(app, activation), bn_momentum)
    if app_shape == (height, width, channels):
        return app
    inputs = keras.Input(shape)
    resized = keras.layers.Resizing(app_shape[0], app_shape[1], name="resize_to_min")(inputs)
    return keras.Model(inputs, app(resized), name=app.name)
