"""How N members' tensors share one in a fused graph (HFTA's layout): images are *folded*
into member-major channel blocks, vectors *stacked* on a leading member axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

IMAGE_RANK = 4  # [batch, height, width, channels] per member: folded



VECTOR_RANK = 2  # [batch, features] per member: stacked



def fold(x: tf.Tensor) -> tf.Tensor:
    """``[members, batch, h, w, c]`` -> ``[batch, h, w, members * c]``."""
    n, h, w, c = x.shape[0], x.shape[2], x.shape[3], x.shape[4]
    return tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [-1, h, w, n * c])



def unfold(x: tf.Tensor, members: int) -> tf.Tensor:
    """``[batch, h, w, members * c]`` -> ``[members, batch, h, w, c]``."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3] // members
    return tf.transpose(tf.reshape(x, [-1, h, w, members, c]), [3, 0, 1, 2, 4])



def stack_vectors(x: tf.Tensor, members: int) -> tf.Tensor:
    """Folded ``[batch, members * c]`` -> stacked ``[members, batch, c]``."""
    return tf.transpose(tf.reshape(x, [-1, members, x.shape[-1] // members]), [1, 0, 2])



def member_mask(x: tf.Tensor, selected: Sequence[bool]) -> tf.Tensor:
    """A mask over ``x``'s member axis that broadcasts against ``x`` (either layout)."""
    n = len(selected)
    if x.shape.rank == IMAGE_RANK:  # folded: member-major channel blocks
        return tf.constant(np.repeat(selected, x.shape[-1] // n))
    return tf.constant(np.reshape(selected, [n] + [1] * (x.shape.rank - 1)))



def per_member(x: tf.Tensor, fns: Sequence[Callable], keys: Sequence[Any]) -> tf.Tensor:
    """Applies member i's elementwise ``fns[i]`` to its slice of ``x``.

    Members with equal ``keys`` share one evaluation; with one key there is no masking.
    """
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    (first, *rest) = groups.values()
    out = fns[first[0]](x)
    for idx in rest:
        selected = [i in idx for i in range(len(keys))]
        out = tf.where(member_mask(x, selected), fns[idx[0]](x), out)
    return out


def by_choice(x: tf.Tensor, choice: tf.Tensor, fns: Sequence[Callable]) -> tf.Tensor:
    """Applies ``fns[choice[i]]`` to member i's slice of ``x``; ``choice`` is ``[members]``
    int32, read when the step runs (every function is evaluated, then selected)."""
    n = choice.shape[0]
    if x.shape.rank == IMAGE_RANK:  # folded: member-major channel blocks
        which = tf.repeat(choice, x.shape[-1] // n)
    else:
        which = tf.reshape(choice, [n] + [1] * (x.shape.rank - 1))
    out = fns[0](x)
    for k, fn in enumerate(fns[1:], start=1):
        out = tf.where(tf.equal(which, k), fn(x), out)
    return out
