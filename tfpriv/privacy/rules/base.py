"""The contract every per-layer rule implements (one file per rule in this package).

A rule says which layers it supports, which of the layer's variables it owns (`variables`:
for a bilinear `FactorRule`, its `kernels(layer)` and `bias(layer)`), how to run the layer so
the gradient at its output can be tapped (`forward`), and how to turn that gradient into
per-row norms and weighted sums of exactly the variables it declares. Three kinds:
`FactorRule` (a kernel gradient sum_t U_t ⊗ V_t), `RowSparseRule` (a table whose gradient
is sum_t e_{i_t} ⊗ g_t, an embedding), `PerExampleRule` (per-example gradients themselves,
for small variables or the fallback). `TapRecorder` refuses a
layer whose trainable variables differ from what its rule declares (a mis-declared rule fails
loudly); a layer no rule supports gets the per-layer fallback.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf

from tfpriv.compat import keras

Layer = keras.layers.Layer


@dataclasses.dataclass
class Tap:
    """One call of a tracked layer in the forward pass."""

    layer: Layer
    rule: "LayerRule"
    inputs: tf.Tensor          # layer input (rows = k * batch size, example-major)
    output: tf.Tensor          # the tensor gradients are taken at (pre-activation for factor rules)
    call_kwargs: dict
    saved: tuple[tf.Tensor, ...] = ()  # other forward-pass tensors the rule needs (a recurrent layer's states)


class LayerRule:
    """Base class: how to run a layer so that its per-example gradients are recoverable. Layers
    without a rule fall back to per-example gradients of the layer alone (`PerLayerFallback`).

    Example:
        The rule the engine uses for a layer (`tfpriv.privacy.register` adds one):

        >>> from tfpriv.compat import keras
        >>> from tfpriv.privacy.rules import rule_for
        >>> rule_for(keras.layers.Dense(2)).name, rule_for(keras.layers.LayerNormalization()).name
        ('dense', 'per_layer')
    """

    name = "base"

    def supports(self, layer: Layer) -> bool:
        raise NotImplementedError

    def variables(self, layer: Layer) -> list[tf.Variable]:
        return list(layer.trainable_weights)

    def forward(self, layer: Layer, original_call: Callable, inputs: tf.Tensor, kwargs: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns (layer output, tensor to differentiate at), or (output, tapped, saved) for a rule that needs
        other tensors of the forward pass later (`Tap.saved`)."""
        raise NotImplementedError


class FactorRule(LayerRule):
    """Layers whose kernel gradient is bilinear: sum over positions of U_t ⊗ V_t."""

    def kernel(self, layer: Layer) -> tf.Variable:
        """The variable whose gradient is sum_t U_t ⊗ V_t."""
        return layer.kernel

    def bias(self, layer: Layer) -> tf.Variable | None:
        """The bias the rule owns, or None."""
        return layer.bias if layer.use_bias else None

    def kernels(self, layer: Layer) -> list[tf.Variable]:
        """The variables whose gradients, stacked along the input axis, make the kernel gradient:
        one for most layers, several for a layer with several products (a recurrent layer's W and U)."""
        return [self.kernel(layer)]

    def split_kernel(self, layer: Layer, grad: tf.Tensor) -> list[tf.Tensor]:
        """A kernel gradient from `kernel_from_outer` or `kernel_sum` -> one gradient per `kernels(layer)`."""
        return [grad]

    def variables(self, layer: Layer) -> list[tf.Variable]:
        bias = self.bias(layer)
        return self.kernels(layer) + ([bias] if bias is not None else [])

    def factors(self, tap: Tap, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(U [R, T, du], V [R, T, dv]) for rows R of this call; linear in `grad`."""
        raise NotImplementedError

    def kernel_from_outer(self, layer: Layer, outer: tf.Tensor) -> tf.Tensor:
        """[..., du, dv] -> [..., *kernel.shape]."""
        raise NotImplementedError

    def bias_rows(self, tap: Tap, grad: tf.Tensor) -> tf.Tensor:
        """Per-row bias gradient [R, n_bias], flattened if the bias has several axes."""
        raise NotImplementedError

    def kernel_sum(self, tap: Tap, grad: tf.Tensor, alive: tf.Tensor) -> tf.Tensor:
        """The kernel gradient for output gradient `grad` (rows already weighted), summed over rows.

        alive [R]: rows that count; the others (dropped examples, whose inputs may be NaN/inf)
        contribute exactly 0. None: every row is summed as it is (the caller checks the sum is finite).
        Default: sum_t U_t ⊗ V_t as one matmul over all rows and positions.
        """
        u, v = self.factors(tap, grad)
        u, v = mask_rows(u, alive), mask_rows(v, alive)
        outer = tf.matmul(tf.reshape(u, [-1, u.shape[-1]]), tf.reshape(v, [-1, v.shape[-1]]), transpose_a=True)
        return self.kernel_from_outer(tap.layer, outer)


class RowSparseRule(LayerRule):
    """Layers with one variable, a table W [n, w] read by rows: row r's gradient is
    sum_t e_{i_rt} ⊗ g_rt (indices i, values g), so a repeated index adds its values up."""

    def table(self, layer: Layer) -> tf.Variable:
        raise NotImplementedError

    def variables(self, layer: Layer) -> list[tf.Variable]:
        return [self.table(layer)]

    def rows(self, tap: Tap, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(indices [R, T] int64, values [R, T, w]) for rows R of this call; values linear in `grad`."""
        raise NotImplementedError


class PerExampleRule(LayerRule):
    """Layers whose per-example gradients are computed outright ([B, *w.shape] per variable)."""

    def per_example(self, tap: Tap, grad: tf.Tensor, batch_size: tf.Tensor, original_call: Callable) -> list[tf.Tensor]:
        """Per-example gradients of `variables(layer)` for this call, rows summed per example."""
        raise NotImplementedError


def plain(layer: Layer) -> bool:
    """Whether `layer` computes with the kernel and bias a rule declares: not a Keras 3 layer with LoRA
    enabled or quantized (other trainable variables; the per-layer fallback takes those)."""
    return not getattr(layer, "lora_enabled", False) and getattr(layer, "quantization_mode", None) is None


def per_example_sums(rows: tf.Tensor, batch_size: tf.Tensor) -> tf.Tensor:
    """[R, ...] rows laid out example-major (R = k * batch size) -> [B, ...] summed per example."""
    return tf.reduce_sum(tf.reshape(rows, tf.concat([[batch_size, -1], tf.shape(rows)[1:]], 0)), axis=1)


def by_position(x: tf.Tensor, depth: int) -> tf.Tensor:
    """[R, ...] -> [R, T, depth] with T static whenever x's shape is but for its rows (a Poisson
    batch's size is unknown when the step is traced): the choice of ghost or direct norms reads T."""
    inner = x.shape[1:]
    positions = inner.num_elements() // depth if inner.is_fully_defined() else -1
    if positions > 0:  # the rows are the one unknown: no shape ops in the graph
        return tf.reshape(x, [-1, positions, depth])
    return tf.reshape(x, [tf.shape(x)[0], positions, depth])


def mask_rows(x: tf.Tensor, keep: tf.Tensor | None) -> tf.Tensor:
    """x with the rows where `keep` [N] is False set to exactly 0 (even if they hold NaN/inf); None: x."""
    if keep is None:
        return x
    if x.shape.rank is not None:  # the usual case: a static shape for keep, no shape ops in the graph
        keep = tf.reshape(keep, [-1] + [1] * (x.shape.rank - 1))
    else:
        keep = tf.reshape(keep, tf.concat([tf.shape(keep), tf.ones([tf.rank(x) - 1], tf.int32)], 0))
    return tf.where(keep, x, tf.zeros_like(x))


def activation_tail(layer: Layer, z: tf.Tensor, bias: tf.Variable | None) -> tf.Tensor:
    """The rest of a Keras layer's call after its kernel product: the rule's bias, then the activation."""
    out = tf.nn.bias_add(z, bias) if bias is not None else z
    return layer.activation(out) if layer.activation is not None else out
