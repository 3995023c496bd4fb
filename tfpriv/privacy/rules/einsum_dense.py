"""EinsumDense (and MultiHeadAttention, whose weights all live in EinsumDense sublayers).

An equation "lhs,kernel->out" whose first letter is the batch and whose other letters are each
in exactly two of the three specs is a Dense over positions: the letters in lhs and out index
positions t, those in lhs and the kernel are contracted (C), those in the kernel and out are
free (F), so a row's kernel gradient is sum_t x_t[C] ⊗ g_t[F]. Other equations (ellipsis, a
letter in all three specs or in one alone) are refused, so the per-layer fallback takes them.
"""
from __future__ import annotations

import re

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras_classes
from tfpriv.privacy.rules.base import FactorRule, Layer, activation_tail, by_position, plain

_EQUATION = re.compile(r"^([a-z]+),([a-z]+)->([a-z]+)$")


def split_equation(equation: str) -> tuple[str, str, str] | None:
    """(lhs, kernel, out) of a supported equation, else None."""
    match = _EQUATION.match(equation.replace(" ", ""))
    if match is None:
        return None
    lhs, kernel, out = match.groups()
    if any(len(set(s)) != len(s) for s in (lhs, kernel, out)) or lhs[0] != out[0] or lhs[0] in kernel:
        return None
    for letter in set(lhs + kernel + out) - {lhs[0]}:
        if (letter in lhs) + (letter in kernel) + (letter in out) != 2:
            return None
    return lhs, kernel, out


class EinsumDenseRule(FactorRule):
    name = "einsum_dense"

    def supports(self, layer: Layer) -> bool:
        return (type(layer) in keras_classes("layers.EinsumDense") and plain(layer)
                and split_equation(layer.equation) is not None)

    def bias(self, layer):
        return layer.bias

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's EinsumDense rule needs a dense tensor input")
        z = tf.einsum(layer.equation, tf.cast(inputs, layer.compute_dtype), self.kernel(layer))
        out = z + self.bias(layer) if self.bias(layer) is not None else z
        return activation_tail(layer, out, None), z

    @staticmethod
    def _letters(layer) -> tuple[str, str, str, str, str, str]:
        """(lhs, kernel, out, position letters in lhs order, contracted and free letters in kernel order)."""
        lhs, kernel, out = split_equation(layer.equation)
        positions = "".join(c for c in lhs[1:] if c in out)
        contracted = "".join(c for c in kernel if c in lhs)
        free = "".join(c for c in kernel if c in out)
        return lhs, kernel, out, positions, contracted, free

    def factors(self, tap, grad):
        lhs, kernel, out, positions, contracted, free = self._letters(tap.layer)
        x = tf.transpose(tf.cast(tap.inputs, grad.dtype), [lhs.index(c) for c in lhs[0] + positions + contracted])
        g = tf.transpose(grad, [out.index(c) for c in out[0] + positions + free])
        size = dict(zip(kernel, self.kernel(tap.layer).shape))
        return (by_position(x, int(np.prod([size[c] for c in contracted]))),
                by_position(g, int(np.prod([size[c] for c in free]))))

    def kernel_from_outer(self, layer, outer):
        # outer [..., C, F] flattened -> [..., *C axes, *F axes] -> the kernel's own axis order.
        _, kernel, _, _, contracted, free = self._letters(layer)
        order = contracted + free
        size = dict(zip(kernel, self.kernel(layer).shape))
        lead = outer.shape.rank - 2
        split = tf.reshape(outer, tf.concat([tf.shape(outer)[:lead], [size[c] for c in order]], 0))
        return tf.transpose(split, list(range(lead)) + [lead + order.index(c) for c in kernel])

    def bias_rows(self, tap, grad):
        # The bias spans the output's trailing axes (size 1 where it broadcasts): sum the others.
        bias_shape = self.bias(tap.layer).shape
        rank = grad.shape.rank
        lead = rank - len(bias_shape)
        broadcast = [lead + i for i, n in enumerate(bias_shape) if n == 1]
        rows = tf.reduce_sum(grad, axis=list(range(1, lead)) + broadcast)
        return tf.reshape(rows, [tf.shape(grad)[0], int(np.prod(bias_shape))])
