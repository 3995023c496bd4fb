"""Per-example critic gradients in O(B): the engine's vectorized pass, vectorized over examples.

`DPGradientEngine` with `clipping="vectorized"` takes `tape.jacobian` of the batch's [B]
per-example losses. pfor then runs the backward pass of the WHOLE batch once per output row
(B backward passes of B examples: O(B^2) work); on the DP-WGAN-GP critic with its second-order
penalty that is 39 s per step at B=128 on 2 cores, against 0.9 s for this module
(docs/results/dpwgan.md has the measurements).

`PerExampleEngine` changes only how the per-example gradients are obtained: it runs the loss of
each example as a batch of one under `tf.vectorized_map` (one forward and backward per
example, vectorized), then hands them to the engine's own `VectorizedPass` arithmetic. Clip
factors, weighted sums, the noise and its normalisation remain the engine's code. It is a
stop-gap until the engine offers the same path; requirements of the loss function:
  * the sample-wise terms of example i depend on row i of `inputs` only (no batch-wise terms),
  * it draws no random numbers (pass any randomness as per-example inputs).
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.privacy.clipping import VectorizedPass
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

PER_EXAMPLE_METHODS = ("vmap", "jacobian")


class PerExampleGradients(VectorizedPass):
    """The engine's VectorizedPass over per-example gradients [B, *w.shape] computed elsewhere."""

    def __init__(self, variables: Sequence[tf.Variable], per_example: Sequence[tf.Tensor], batch_size: tf.Tensor):
        self.variables = list(variables)
        self.layout = None
        self.batch_size = batch_size
        self.phi = self.psi = None
        self.j_phi = list(per_example)
        self.j_psi = None


class PerExampleEngine(DPGradientEngine):
    """DPGradientEngine whose vectorized per-example gradients cost O(B) instead of O(B^2)."""

    def __init__(self, config: DPConfig, roots, spec: TermSpec, variables=None):
        super().__init__(config, roots, spec, variables)
        if spec.has_batch_terms:
            raise ConfigError("PerExampleEngine: batch-wise terms are not per-example; use DPGradientEngine")

    def _pass(self, loss_fn, inputs, layout, batch_size):
        if self.recorder is not None:  # fast (ghost-norm) path: the engine's own
            return super()._pass(loss_fn, inputs, layout, batch_size)
        names = self.spec.sample
        variables = self.variables

        def one(example):
            single = tf.nest.map_structure(lambda t: t[None], example)
            with tf.GradientTape() as tape:
                terms = loss_fn(single, BatchLayout.single(1))
                phi = tf.reduce_sum(terms.sample_total())
            grads = tape.gradient(phi, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return grads, {k: tf.reshape(terms.sample[k], []) for k in names}

        def per_example():
            return tf.vectorized_map(one, inputs, fallback_to_while_loop=True)

        def empty():  # a Poisson batch can be empty: no examples, only noise (pfor cannot stack 0 rows)
            return ([tf.zeros(tf.concat([[0], tf.shape(v)], 0), v.dtype) for v in variables],
                    {k: tf.zeros([0]) for k in names})

        grads, values = tf.cond(batch_size > 0, per_example, empty)
        return PerExampleGradients(variables, grads, batch_size), LossTerms(sample=values)


def make_engine(config: DPConfig, critic: tf.keras.Model, spec: TermSpec, per_example: str = "vmap") -> DPGradientEngine:
    """The critic's engine: `vmap` (PerExampleEngine) or `jacobian` (the engine's own vectorized pass)."""
    if per_example not in PER_EXAMPLE_METHODS:
        raise ConfigError(f"--per_example: must be one of {', '.join(PER_EXAMPLE_METHODS)}, got {per_example!r}")
    cls = PerExampleEngine if per_example == "vmap" else DPGradientEngine
    return cls(config, critic, spec, variables=critic.trainable_variables)
