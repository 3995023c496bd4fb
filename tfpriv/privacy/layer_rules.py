"""Per-layer rules for per-example gradient norms and clipped sums without per-example gradients.

For the layers with a rule, a row's kernel gradient is a sum of outer products
`sum_t U_t ⊗ V_t` over the positions t where the kernel is applied (ghost-norm
factorisation): Dense (t over extra input axes), Conv2D (t over output pixels, U = input
patches, V = output gradients) and Conv2DTranspose (the adjoint of a convolution: U =
patches of the output gradient, V = input pixels). Both factors are computed from one
forward pass (layer inputs) and one backward pass (gradients at the pre-activation
output), which gives norms (ghost or direct, whichever is cheaper) and weighted sums
(book-keeping) for any per-row weighting.

A layer with trainable weights and no rule falls back to per-example gradients of that
layer alone, vectorised with `tf.vectorized_map` over a local vector-Jacobian product.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf

Layer = tf.keras.layers.Layer


@dataclasses.dataclass
class Tap:
    """One call of a tracked layer in the forward pass."""

    layer: Layer
    rule: "LayerRule"
    inputs: tf.Tensor          # layer input (rows = k * batch size, example-major)
    output: tf.Tensor          # the tensor gradients are taken at (pre-activation for factor rules)
    call_kwargs: dict


class LayerRule:
    """Base class: how to run a layer so that its per-example gradients are recoverable."""

    name = "base"

    def supports(self, layer: Layer) -> bool:
        raise NotImplementedError

    def variables(self, layer: Layer) -> list[tf.Variable]:
        return list(layer.trainable_weights)

    def forward(self, layer: Layer, original_call: Callable, inputs: tf.Tensor, kwargs: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns (layer output, tensor to differentiate at)."""
        raise NotImplementedError


class FactorRule(LayerRule):
    """Layers whose kernel gradient is bilinear: sum over positions of U_t ⊗ V_t."""

    def variables(self, layer: Layer) -> list[tf.Variable]:
        return [layer.kernel] + ([layer.bias] if layer.use_bias else [])

    def factors(self, tap: Tap, grad: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(U [R, T, du], V [R, T, dv]) for rows R of this call; linear in `grad`."""
        raise NotImplementedError

    def kernel_from_outer(self, layer: Layer, outer: tf.Tensor) -> tf.Tensor:
        """[..., du, dv] -> [..., *kernel.shape]."""
        raise NotImplementedError

    def bias_rows(self, tap: Tap, grad: tf.Tensor) -> tf.Tensor:
        """Per-row bias gradient [R, n_bias]."""
        raise NotImplementedError


def _activation_tail(layer: Layer, z: tf.Tensor) -> tf.Tensor:
    out = tf.nn.bias_add(z, layer.bias) if layer.use_bias else z
    return layer.activation(out) if layer.activation is not None else out


class DenseRule(FactorRule):
    name = "dense"

    def supports(self, layer: Layer) -> bool:
        return type(layer) is tf.keras.layers.Dense

    def forward(self, layer, original_call, inputs, kwargs):
        if isinstance(inputs, (tf.SparseTensor, tf.RaggedTensor)):
            raise TypeError(f"{layer.name}: sparse/ragged inputs are not supported by the DP engine")
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank == 2:
            z = tf.matmul(x, layer.kernel)
        else:
            z = tf.tensordot(x, layer.kernel, [[x.shape.rank - 1], [0]])
        return _activation_tail(layer, z), z

    def factors(self, tap, grad):
        d_in, d_out = tap.layer.kernel.shape
        rows = tf.shape(tap.inputs)[0]
        u = tf.reshape(tf.cast(tap.inputs, grad.dtype), [rows, -1, d_in])
        v = tf.reshape(grad, [rows, -1, d_out])
        return u, v

    def kernel_from_outer(self, layer, outer):
        return outer

    def bias_rows(self, tap, grad):
        d_out = tap.layer.kernel.shape[-1]
        return tf.reduce_sum(tf.reshape(grad, [tf.shape(grad)[0], -1, d_out]), axis=1)


def _patches(images: tf.Tensor, kernel_hw, strides, dilation, padding: str) -> tf.Tensor:
    """[R, H, W, C] -> [R, H', W', kh*kw*C] in (kh, kw, C) order, matching conv2d's windows."""
    kh, kw = kernel_hw
    return tf.image.extract_patches(
        images, sizes=[1, kh, kw, 1], strides=[1, strides[0], strides[1], 1],
        rates=[1, dilation[0], dilation[1], 1], padding=padding.upper())


class _ConvRule(FactorRule):
    """Shared by Conv2D and Conv2DTranspose: kernel reshapes and per-row bias sums."""

    def kernel_from_outer(self, layer, outer):
        lead = tf.shape(outer)[:-2]
        return tf.reshape(outer, tf.concat([lead, layer.kernel.shape], 0))

    def bias_rows(self, tap, grad):
        return tf.reduce_sum(grad, axis=[1, 2])


class Conv2DRule(_ConvRule):
    name = "conv2d"

    def supports(self, layer):
        return (type(layer) is tf.keras.layers.Conv2D and layer.data_format == "channels_last"
                and layer.groups == 1 and layer.padding in ("same", "valid"))

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        if x.shape.rank != 4:
            raise TypeError(f"{layer.name}: the DP engine's Conv2D rule needs rank-4 inputs, got {x.shape}")
        z = layer.convolution_op(x, layer.kernel)
        return _activation_tail(layer, z), z

    def factors(self, tap, grad):
        layer = tap.layer
        rows = tf.shape(grad)[0]
        u = _patches(tf.cast(tap.inputs, grad.dtype), layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
        u = tf.reshape(u, [rows, -1, u.shape[-1]])
        v = tf.reshape(grad, [rows, -1, layer.filters])
        return u, v


class Conv2DTransposeRule(_ConvRule):
    name = "conv2d_transpose"

    def supports(self, layer):
        return (type(layer) is tf.keras.layers.Conv2DTranspose and layer.data_format == "channels_last"
                and layer.output_padding is None and tuple(layer.dilation_rate) == (1, 1)
                and layer.padding in ("same", "valid"))

    def forward(self, layer, original_call, inputs, kwargs):
        x = tf.cast(inputs, layer.compute_dtype)
        # Same computation as Conv2DTranspose.call up to the bias, so `z` is tapped pre-bias.
        shape = tf.shape(x)
        kh, kw = layer.kernel_size
        sh, sw = layer.strides
        dims = x.shape.as_list()
        h = dims[1] if dims[1] is not None else shape[1]
        w = dims[2] if dims[2] is not None else shape[2]
        if layer.padding == "same":
            out_h, out_w = h * sh, w * sw
        else:
            out_h, out_w = (h - 1) * sh + kh, (w - 1) * sw + kw
        out_shape = tf.stack([shape[0], out_h, out_w, layer.filters])
        z = tf.nn.conv2d_transpose(x, layer.kernel, out_shape, strides=[1, sh, sw, 1], padding=layer.padding.upper())
        if isinstance(out_h, int) and isinstance(out_w, int):
            z.set_shape([None, out_h, out_w, layer.filters])
        return _activation_tail(layer, z), z

    def factors(self, tap, grad):
        # y = conv_transpose(x, K) is the adjoint of x' = conv2d(y', K), so dL/dK is conv2d's
        # filter gradient with the roles swapped: patches of dL/dy against the input pixels.
        layer = tap.layer
        rows = tf.shape(grad)[0]
        u = _patches(grad, layer.kernel_size, layer.strides, (1, 1), layer.padding)
        u = tf.reshape(u, [rows, -1, u.shape[-1]])
        v = tf.reshape(tf.cast(tap.inputs, grad.dtype), [rows, -1, tap.inputs.shape[-1]])
        return u, v


class VectorizedRule(LayerRule):
    """Fallback: per-example gradients of one layer by a vectorised local VJP."""

    name = "vectorized"

    def supports(self, layer):
        return True

    def forward(self, layer, original_call, inputs, kwargs):
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's per-layer fallback needs a single tensor input")
        out = original_call(inputs, **kwargs)
        return out, out

    def per_example(self, tap: Tap, grad: tf.Tensor, batch_size: tf.Tensor, original_call: Callable) -> list[tf.Tensor]:
        """[B, *w.shape] per-example gradients of the layer's variables for this call."""
        variables = self.variables(tap.layer)
        x = tf.reshape(tap.inputs, tf.concat([[batch_size, -1], tf.shape(tap.inputs)[1:]], 0))
        g = tf.reshape(grad, tf.concat([[batch_size, -1], tf.shape(grad)[1:]], 0))
        kwargs = tap.call_kwargs

        def one(args):
            xi, gi = args
            with tf.GradientTape() as tape:
                yi = original_call(xi, **kwargs)
            grads = tape.gradient(yi, variables, output_gradients=gi,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return grads

        return tf.vectorized_map(one, (x, g))


REGISTRY: list[LayerRule] = [DenseRule(), Conv2DRule(), Conv2DTransposeRule()]
FALLBACK = VectorizedRule()


def rule_for(layer: Layer) -> LayerRule:
    """The fast rule for `layer`, or the vectorised fallback."""
    for rule in REGISTRY:
        if rule.supports(layer):
            return rule
    return FALLBACK


def register(rule: LayerRule) -> None:
    """Adds a rule ahead of the built-in ones (for user layers)."""
    REGISTRY.insert(0, rule)

