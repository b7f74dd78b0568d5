"""Small Keras models of a user's kind (``mlp_with_dropout``, ``small_cnn``,
``every_layer_cnn``) and what tests count in a model (``activation_counts``, ``bn_momenta``).
Keras is imported inside each function."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras


def mlp_with_dropout(input_shape, num_classes, hparams) -> keras.Model:
    """A user's kind of model: its Dropout layer draws random masks in training."""
    import keras

    return keras.Sequential([keras.Input(tuple(input_shape)),
                             keras.layers.Dense(16, activation=hparams["activation"]),
                             keras.layers.Dropout(0.3), keras.layers.Dense(num_classes)])


def small_cnn(input_shape, num_classes, hparams, filters=4, momentum=0.7):
    """Convolution, BatchNorm, a runtime activation, a depthwise convolution, pooling."""
    import keras

    from packexp.models.activation import SelectActivation
    from packexp.models.keras_apps import ACTIVATIONS

    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Conv2D(filters, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization(momentum=momentum)(x)
    x = SelectActivation(ACTIVATIONS, hparams.get("activation", "relu"), relu_max_value=6.0)(x)
    x = keras.layers.DepthwiseConv2D(3)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


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
