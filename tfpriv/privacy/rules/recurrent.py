"""LSTM and GRU (Keras 2 and Keras 3): each time step's gate pre-activations are x_t W + h_{t-1} U + b, bilinear in
the weights, so a row's gradient of the stacked kernel [W; U] is sum_t u_t ⊗ v_t over the time steps,
with v_t built from δ_t = ∂L/∂(x_t W) and u_t from x_t and the states the forward pass saves.

`forward` computes x W for all steps in one product (the tapped tensor, so δ_t is its gradient: x_t W
enters step t's gates by a sum) and runs the recurrence as Keras' step does in a `tf.scan` (executed
eagerly: a loop of the step traced once), masking as `backend.rnn` (a masked step keeps the states and
repeats the previous output, or outputs 0 with `zero_output_for_mask`; its δ_t is 0). Both GRU variants
are exact; see `GRURule.pairs`. Keras 3's layers keep the same weights on `layer.cell` and, off cuDNN,
run the same `backend.rnn` recurrence.
Refused (the per-layer fallback takes them): dropout or recurrent_dropout, unroll, time_major,
stateful, subclasses, a Keras 3 layer whose call would run cuDNN (`use_cudnn=True`, or "auto" with a
GPU and cuDNN-compatible arguments: cuDNN outputs 0 at masked steps; `use_cudnn=False` gets the rule
on a GPU) or with LoRA/quantization (`plain`); `Bidirectional` is one unit of the tap recorder, so its
inner layers never reach a rule.
"""
from __future__ import annotations

import functools
import weakref

import tensorflow as tf

from tfpriv.compat import is_keras3, keras3, keras_classes
from tfpriv.privacy.rules.base import FactorRule, Layer, Tap, plain

_CALL_KWARGS = {"mask", "training", "initial_state"}


def _runs_cudnn(layer: Layer) -> bool:
    """Whether Keras 3's call of `layer` would try cuDNN (its `inner_loop`'s test, on this machine's devices)."""
    if not is_keras3(layer) or layer.use_cudnn is False:
        return False
    cell = layer.cell
    kwargs = {"reset_after": cell.reset_after} if hasattr(cell, "reset_after") else {}
    return layer.use_cudnn is True or keras3().src.backend.cudnn_ok(
        cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias, **kwargs)


class RecurrentRule(FactorRule):
    """The shared recurrence and factors; a subclass gives its layer type, step and factor pairs."""

    layer_path: str  # the layer class in either Keras, for `keras_classes`
    n_states: int  # states carried between steps (LSTM: h and c)
    n_saved: int  # per-step tensors the factors need besides h_{t-1} (GRU: the reset gate)

    def __init__(self):
        self._traced: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layer -> its traced `step`

    def supports(self, layer: Layer) -> bool:
        return (type(layer) in keras_classes(self.layer_path) and plain(layer) and not layer.stateful
                and not layer.unroll and not getattr(layer, "time_major", False)  # Keras 3 has no time_major
                and layer.cell.dropout == 0 and layer.cell.recurrent_dropout == 0 and not _runs_cudnn(layer))

    def kernels(self, layer: Layer) -> list[tf.Variable]:
        return [layer.cell.kernel, layer.cell.recurrent_kernel]

    def bias(self, layer: Layer) -> tf.Variable | None:
        return layer.cell.bias if layer.cell.use_bias else None

    def step(self, layer: Layer, xw_t: tf.Tensor, states: tuple) -> tuple[tuple, tf.Tensor, tuple]:
        """One time step from its input product [R, G]: (new states, output [R, units], the `n_saved`
        per-step tensors [R, units])."""
        raise NotImplementedError

    def pairs(self, tap: Tap, grad: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """(u [R, T, dx + units], v [R, T, G]) pairs whose outer products, summed, give [W; U]'s gradient."""
        raise NotImplementedError

    def forward(self, layer, original_call, inputs, kwargs):
        unknown = sorted(set(kwargs) - _CALL_KWARGS)
        if unknown:
            raise TypeError(f"{layer.name}: the DP engine's {self.name} rule does not take the call arguments "
                            f"{unknown}")
        initial = kwargs.get("initial_state")
        if isinstance(inputs, (list, tuple)):  # Keras passes a functional model's initial state with the inputs
            inputs, initial = inputs[0], list(inputs[1:]) or initial
        if not isinstance(inputs, tf.Tensor):
            raise TypeError(f"{layer.name}: the DP engine's {self.name} rule needs a dense tensor input")
        x = tf.cast(inputs, layer.compute_dtype)
        rows, units = tf.shape(x)[0], layer.cell.units
        if initial is None:
            states = tuple(tf.zeros([rows, units], x.dtype) for _ in range(self.n_states))
        else:
            states = tuple(tf.cast(s, x.dtype) for s in tf.nest.flatten(initial))
        mask = kwargs.get("mask")
        mask = mask[0] if isinstance(mask, (list, tuple)) else mask
        mask = None if mask is None else tf.cast(mask, tf.bool)  # as `backend.rnn` casts it

        xw = tf.tensordot(x, layer.cell.kernel, [[2], [0]])
        elems = [tf.transpose(xw, [1, 0, 2])] + ([tf.transpose(mask)] if mask is not None else [])
        if layer.go_backwards:
            elems = [tf.reverse(e, [0]) for e in elems]
        zero_masked = layer.zero_output_for_mask
        # Executed eagerly (the engine's check of the clipping path), the steps run as a Python loop calling
        # one traced function per layer: the tape then records and differentiates T calls, not T times a
        # dozen ops and `tf.scan`'s TensorArray reads and writes (the bench's GRU: its check 2.3 -> 1.7 s, an
        # LSTM's 1.6 -> 1.5 s); traced, it is one `tf.scan`.
        eager = tf.executing_eagerly() and bool(elems[0].shape[0])
        step = self._traced_step(layer) if eager else functools.partial(self.step, layer)

        def scan_step(acc, elem):
            states_prev, out_prev, _ = acc
            new_states, out, saved = step(elem[0], states_prev)
            if mask is not None:
                keep = elem[1][:, None]
                new_states = tuple(tf.where(keep, n, s) for n, s in zip(new_states, states_prev))
                out = tf.where(keep, out, tf.zeros_like(out) if zero_masked else out_prev)
            return new_states, out, saved

        zeros = tf.zeros([rows, units], x.dtype)
        initializer = (states, zeros, tuple(zeros for _ in range(self.n_saved)))
        if eager:
            acc, trace = initializer, []
            for elem in zip(*(tf.unstack(e) for e in elems)):
                acc = scan_step(acc, elem)
                trace.append(acc)
            all_states, outs, saved = tf.nest.map_structure(lambda *t: tf.stack(t), *trace)
        else:
            all_states, outs, saved = tf.scan(scan_step, tuple(elems), initializer=initializer)

        # h_{t-1} of each step, then the per-step tensors in the inputs' time order (that of xw).
        h_prev = tf.concat([states[0][None], all_states[0][:-1]], axis=0)
        per_step = [h_prev, *saved]
        if layer.go_backwards:
            per_step = [tf.reverse(s, [0]) for s in per_step]
        per_step = [tf.transpose(s, [1, 0, 2]) for s in per_step]

        out = tf.transpose(outs, [1, 0, 2]) if layer.return_sequences else outs[-1]
        if layer.return_state:  # Keras 3 returns a tuple, Keras 2 a list
            out = (tuple if is_keras3(layer) else list)([out] + [s[-1] for s in all_states])
        return out, xw, (x, *per_step)

    def _traced_step(self, layer: Layer):
        """`step` of `layer` as one `tf.function`, kept while the layer lives (which it does not keep alive)."""
        if layer not in self._traced:
            ref = weakref.ref(layer)
            self._traced[layer] = tf.function(lambda xw_t, states: self.step(ref(), xw_t, states),
                                              autograph=False, reduce_retracing=True)
        return self._traced[layer]

    def factors(self, tap, grad):
        pairs = self.pairs(tap, grad)
        return tf.concat([u for u, _ in pairs], axis=1), tf.concat([v for _, v in pairs], axis=1)

    def kernel_from_outer(self, layer, outer):
        return outer

    def split_kernel(self, layer, grad):
        dx = layer.cell.kernel.shape[0]
        return [grad[..., :dx, :], grad[..., dx:, :]]

    def bias_rows(self, tap, grad):
        return tf.reduce_sum(grad, axis=1)


class LSTMRule(RecurrentRule):
    """LSTM: z_t = x_t W + h_{t-1} U + b with gates i, f, c, o; u_t = [x_t, h_{t-1}], v_t = δ_t."""

    name = "lstm"
    layer_path = "layers.LSTM"
    n_states = 2
    n_saved = 0

    def step(self, layer, xw_t, states):
        h, c = states
        cell = layer.cell
        z = xw_t + tf.matmul(h, cell.recurrent_kernel)
        if cell.use_bias:
            z = tf.nn.bias_add(z, cell.bias)
        z_i, z_f, z_c, z_o = tf.split(z, 4, axis=1)
        c = cell.recurrent_activation(z_f) * c + cell.recurrent_activation(z_i) * cell.activation(z_c)
        h = cell.recurrent_activation(z_o) * cell.activation(c)
        return (h, c), h, ()

    def pairs(self, tap, grad):
        x, h_prev = tap.saved
        return [(tf.concat([tf.cast(x, grad.dtype), tf.cast(h_prev, grad.dtype)], axis=-1), grad)]


class GRURule(RecurrentRule):
    """GRU, gates z, r and the candidate h̃. With δ = ∂L/∂(x W) = (δz, δr, δh) and reset gate r_t:

    reset_after (the default): h̃ = act(x W_h + b_in + r ⊙ (h U_h + b_rec)), so U's candidate block and
    the recurrent bias see r ⊙ δh, W's see δh. Pairs ([x, h], (δz, δr, r ⊙ δh)) and
    ([x, 0], (0, 0, (1 - r) ⊙ δh)): the second completes W_h's x ⊗ δh (no cancellation for r in [0, 1]).
    reset_after=False: h̃ = act(x W_h + (r ⊙ h) U_h + b), so U_h's row factor is r ⊙ h:
    pairs ([x, h], (δz, δr, 0)) and ([x, r ⊙ h], (0, 0, δh)).
    """

    name = "gru"
    layer_path = "layers.GRU"
    n_states = 1
    n_saved = 1

    def step(self, layer, xw_t, states):
        (h,) = states
        cell = layer.cell
        units = cell.units
        if cell.use_bias:
            bias_in, bias_rec = tf.unstack(cell.bias) if cell.reset_after else (cell.bias, None)
            xw_t = tf.nn.bias_add(xw_t, bias_in)
        x_z, x_r, x_h = tf.split(xw_t, 3, axis=1)
        if cell.reset_after:
            rec = tf.matmul(h, cell.recurrent_kernel)
            if cell.use_bias:
                rec = tf.nn.bias_add(rec, bias_rec)
            rec_z, rec_r, rec_h = tf.split(rec, 3, axis=1)
            z, r = cell.recurrent_activation(x_z + rec_z), cell.recurrent_activation(x_r + rec_r)
            candidate = cell.activation(x_h + r * rec_h)
        else:
            rec_z, rec_r = tf.split(tf.matmul(h, cell.recurrent_kernel[:, :2 * units]), 2, axis=1)
            z, r = cell.recurrent_activation(x_z + rec_z), cell.recurrent_activation(x_r + rec_r)
            candidate = cell.activation(x_h + tf.matmul(r * h, cell.recurrent_kernel[:, 2 * units:]))
        h = z * h + (1 - z) * candidate
        return (h,), h, (r,)

    def pairs(self, tap, grad):
        x, h_prev, r = (tf.cast(s, grad.dtype) for s in tap.saved)
        g_zr, g_h = grad[..., :-tap.layer.cell.units], grad[..., -tap.layer.cell.units:]
        zeros_zr, zeros_h = tf.zeros_like(g_zr), tf.zeros_like(h_prev)
        if tap.layer.cell.reset_after:
            return [(tf.concat([x, h_prev], -1), tf.concat([g_zr, r * g_h], -1)),
                    (tf.concat([x, zeros_h], -1), tf.concat([zeros_zr, (1 - r) * g_h], -1))]
        return [(tf.concat([x, h_prev], -1), tf.concat([g_zr, tf.zeros_like(g_h)], -1)),
                (tf.concat([x, r * h_prev], -1), tf.concat([zeros_zr, g_h], -1))]

    def bias_rows(self, tap, grad):
        if not tap.layer.cell.reset_after:
            return super().bias_rows(tap, grad)
        r = tf.cast(tap.saved[2], grad.dtype)
        units = tap.layer.cell.units
        recurrent = tf.concat([grad[..., :-units], r * grad[..., -units:]], -1)
        return tf.concat([tf.reduce_sum(grad, axis=1), tf.reduce_sum(recurrent, axis=1)], axis=-1)
