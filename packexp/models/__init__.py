"""Model builders: ``build(input_shape, num_classes, hparams, **config) -> keras.Model``.

One module per model, named as its config file. A builder returns logits and reads the
model-level hyper-parameters (``activation``) from ``hparams``; training-level ones (batch
size, optimizer, learning rate) belong to the pack.
"""
