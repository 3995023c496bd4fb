"""`clipping="per_example"`: per-example gradients in O(B), each example's loss differentiated alone.

`clipping="vectorized"` takes `tape.jacobian` of the batch's [B] losses; pfor then runs the
backward pass of the whole batch once per row (B backward passes of B examples: O(B^2)). On the
DP-WGAN-GP critic, whose gradient penalty differentiates through the model twice, that is ~39 s
per step at B=128 on 2 cores. This path instead evaluates the loss of each example as a batch of
one under `tf.vectorized_map` (one forward and one backward pass per example, vectorized: O(B);
one example after another where pfor cannot vectorize the model, e.g. LSTM/GRU: `map_examples`)
and hands the gradients to the engine's own clip factors, weighted sums and noise (`JacobianSums`).
Like the Jacobian path it is exact for second-order losses.

Batch-wise terms, when active:
  singleton partitions (`num_partitions=0`): example i's partition is example i, so its psi is
    its loss as a batch of one too and comes out of the same vectorized pass;
  otherwise (micro's one partition, termwise's b partitions): psi of the P partitions from one
    forward pass of the whole batch, differentiated per partition with `tape.jacobian`
    (P backward passes of the batch: O(P B)).

Requirements (checked by `DPGradientEngine.verify` before training, on a public batch shaped like
the first (`public_batch`), which compares the norms
with the Jacobian path): every input tensor has a leading batch axis, and example i's
sample-wise terms equal its terms as a batch of one (no batch-size-dependent scaling, no random
numbers drawn inside the loss: pass randomness as per-example inputs).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import tensorflow as tf

from tfpriv.privacy.clipping import JacobianSums, jacobian, row_sq_norms, variables_dtype, weighted_rows
from tfpriv.privacy.pfor_rules import map_examples
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

LossFn = Callable[[object, BatchLayout], LossTerms]
ZERO = tf.UnconnectedGradients.ZERO
# (squared norms [n], ok [n]) -> (clip factors [n], number dropped): the engine's, per example.
ClipFactors = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


class ChunkedSums(NamedTuple):
    sums: list[tf.Tensor]
    sq_norms: tf.Tensor
    coefficients: tf.Tensor
    dropped: tf.Tensor
    sample: dict[str, tf.Tensor]


class PerExamplePass(JacobianSums):
    """The engine's quantities from per-example (and per-partition) gradients computed by vmap."""

    def __init__(self, variables: Sequence[tf.Variable], j_phi: Sequence[tf.Tensor],
                 j_psi: Sequence[tf.Tensor] | None, psi_reaches: Sequence[bool] | None, layout: BatchLayout,
                 batch_size: tf.Tensor):
        self.variables = list(variables)
        self.layout = layout
        self.batch_size = batch_size
        self.j_phi = list(j_phi)
        self.j_psi = list(j_psi) if j_psi is not None else None
        self.psi_reaches = list(psi_reaches) if j_psi is not None else None


def _as_batch_of_one(example):
    return tf.nest.map_structure(lambda t: t[None], example)


def _scalars(values, names: Sequence[str]) -> dict[str, tf.Tensor]:
    """An example's term values, in float32 whatever the model's dtype: they are only logged."""
    return {k: tf.cast(tf.reshape(values[k], []), tf.float32) for k in names}


def _example_function(loss_fn: LossFn, variables: list[tf.Variable], spec: TermSpec, batch_names: Sequence[str],
                      psi_grads: bool, psi_reaches: list[bool]) -> Callable:
    """example -> (grad phi_i per variable, grad psi of example i alone or [], {name: sample value},
    {name: batch value}): the example's loss as a batch of one. `psi_reaches` is filled when traced."""
    def one(example):
        with tf.GradientTape(persistent=psi_grads) as tape:
            terms = loss_fn(_as_batch_of_one(example), BatchLayout.single(1))
            phi = tf.reduce_sum(terms.sample_total())
            psi = tf.reduce_sum(terms.batch_total(1)) if psi_grads else None
        g_phi = tape.gradient(phi, variables, unconnected_gradients=ZERO)
        g_psi = []
        if psi_grads:
            g_psi = tape.gradient(psi, variables, unconnected_gradients=tf.UnconnectedGradients.NONE)
            psi_reaches[:] = [g is not None for g in g_psi]
            g_psi = [tf.zeros_like(v) if g is None else g for g, v in zip(g_psi, variables)]
        return g_phi, g_psi, _scalars(terms.sample, spec.sample), _scalars(terms.batch, batch_names)
    return one


def example_gradients(loss_fn: LossFn, inputs, variables: Sequence[tf.Variable], spec: TermSpec,
                      batch_size: tf.Tensor, singleton_psi: bool = False, psi_grads: bool = False,
                      owner: object = None):
    """Per-example grads of phi_i, and of psi of example i alone (`psi_grads`), plus term values.

    singleton_psi: every example is its own partition, so its batch-wise values are logged too.
    owner: whose per-example function this is (the engine), for `map_examples` to remember a failed pfor.
    Returns (g_phi [B, *w.shape] per variable, g_psi likewise or [], {name: [B]} sample values,
    {name: [B]} batch values if `singleton_psi` else {}, per variable whether psi reaches it
    (in the traced graph; all False unless `psi_grads`)).
    """
    variables = list(variables)
    batch_names = spec.batch if singleton_psi else ()
    psi_reaches: list[bool] = []  # filled when `one` is traced
    one = _example_function(loss_fn, variables, spec, batch_names, psi_grads, psi_reaches)

    def vectorized():
        return map_examples(one, inputs, owner=owner)

    def empty():  # a Poisson batch can be empty (noise only); pfor cannot stack 0 rows
        none = [tf.zeros(tf.concat([[0], tf.shape(v)], 0), v.dtype) for v in variables]
        return (none, list(none) if psi_grads else [], {k: tf.zeros([0]) for k in spec.sample},
                {k: tf.zeros([0]) for k in batch_names})

    out = tf.cond(batch_size > 0, vectorized, empty)
    if psi_grads and not psi_reaches:  # eager and an empty batch: `one` was not traced, so trace it (not run)
        example_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape[1:], t.dtype), inputs)
        tf.function(one, autograph=False).get_concrete_function(example_spec)
    return (*out, psi_reaches if psi_grads else [False] * len(variables))


def partition_gradients(loss_fn: LossFn, inputs, variables: Sequence[tf.Variable], layout: BatchLayout,
                        active: bool) -> tuple[list[tf.Tensor] | None, list[bool] | None, dict[str, tf.Tensor]]:
    """grad psi_j per partition [P, *w.shape] and per variable whether psi reaches it (None unless
    `active`), and the [P] batch-wise values."""
    with tf.GradientTape() as tape:
        terms = loss_fn(inputs, layout)
        psi = terms.batch_total(layout.num_partitions)
    j_psi, reaches = jacobian(tape, psi, variables) if active else (None, None)
    return j_psi, reaches, dict(terms.batch)


def per_example_pass(loss_fn: LossFn, inputs, variables: Sequence[tf.Variable], spec: TermSpec,
                     layout: BatchLayout, batch_size: tf.Tensor, batch_terms: bool,
                     singleton_partitions: bool, owner: object = None) -> tuple[PerExamplePass, LossTerms]:
    """The pass the engine clips, and the loss terms it logs.

    batch_terms: whether batch-wise terms enter the private gradient (else only logged).
    singleton_partitions: every example is its own partition (psi from the vectorized pass).
    owner: the engine (`example_gradients`).
    """
    singleton_psi = spec.has_batch_terms and singleton_partitions
    g_phi, g_psi, sample, batch, reaches = example_gradients(loss_fn, inputs, variables, spec, batch_size,
                                                             singleton_psi, psi_grads=singleton_psi and batch_terms,
                                                             owner=owner)
    j_psi = g_psi if (singleton_psi and batch_terms) else None
    if spec.has_batch_terms and not singleton_partitions:
        j_psi, reaches, batch = partition_gradients(loss_fn, inputs, variables, layout, batch_terms)
    return (PerExamplePass(variables, g_phi, j_psi, reaches, layout, batch_size),
            LossTerms(sample=sample, batch=batch))


CHUNK_BYTES = 64 * 2**20  # per-example gradients held at once by `clipped_sums_by_chunk` (DPConfig.per_example_chunk)


def chunk_size(variables: Sequence[tf.Variable], expected_batch_size: float | None = None) -> int:
    """Examples per chunk: at most as many as have `CHUNK_BYTES` of per-example gradients (at least one).

    With `expected_batch_size`, that many chunks of equal size: the DP-WGAN-GP critic (62 examples per
    64 MiB) at B = 64 takes two chunks of 32, not 62 and then 2 on their own (chunks run one at a time)."""
    size = sum(v.shape.num_elements() * v.dtype.size for v in variables)
    most = max(1, CHUNK_BYTES // max(size, 1))
    if expected_batch_size is None:
        return most
    return math.ceil(expected_batch_size / math.ceil(expected_batch_size / most))


def clipped_sums_by_chunk(loss_fn: LossFn, inputs, ok: tf.Tensor, variables: Sequence[tf.Variable],
                          spec: TermSpec, batch_size: tf.Tensor, clip_factors: ClipFactors, scale: float,
                          chunk: int, owner: object = None) -> ChunkedSums:
    """sum_i scale * c_i grad phi_i for a loss of sample-wise terms only, `chunk` examples at a time.

    c_i = clip_factors(||grad phi_i||^2, ok_i) depends on example i alone, so each chunk's
    per-example gradients are clipped and summed as soon as they are computed: the step holds
    [chunk, *w.shape] per variable and one chunk's intermediates, never the whole batch's. The
    chunks run one after another (`parallel_iterations=1`): the loop's default runs up to 10 at
    once, whose intermediates are then held together (the critic at B = 64 in chunks of 16: 4.3-4.7x
    the non-private step's peak memory, 2.3x one at a time).
    Each example's gradient is that of `example_gradients`.
    Returns (sums per variable, sq norms [B], c [B], number dropped, {name: [B]} sample values).
    """
    variables = list(variables)
    one = _example_function(loss_fn, variables, spec, (), False, [])
    chunks = (batch_size + chunk - 1) // chunk

    def per_example(dtype):
        """[B] values written a chunk at a time after an empty element (eager ones cannot concatenate nothing)."""
        values = tf.TensorArray(dtype, size=chunks + 1, infer_shape=False, element_shape=[None])
        return values.write(0, tf.zeros([0], dtype))

    def body(k, sums, dropped, sq_norms, coefficients, sample):
        start = k * chunk
        part = tf.nest.map_structure(lambda t: t[start:start + chunk], inputs)
        g, _, values, _ = map_examples(one, part, owner=owner)
        sq = tf.add_n([row_sq_norms(j) for j in g])
        c, d = clip_factors(sq, ok[start:start + chunk])
        sums = [s + weighted_rows(c * scale, j) for s, j in zip(sums, g)]
        sample = {name: sample[name].write(k + 1, tf.cast(values[name], tf.float32)) for name in sample}
        return k + 1, sums, dropped + d, sq_norms.write(k + 1, sq), coefficients.write(k + 1, c), sample

    norm_dtype = variables_dtype(variables)  # of the squared norms and clip factors, as on the other paths
    start = (tf.constant(0), [tf.zeros_like(v) for v in variables], tf.constant(0.0), per_example(norm_dtype),
             per_example(norm_dtype), {name: per_example(tf.float32) for name in spec.sample})
    _, sums, dropped, sq_norms, coefficients, sample = tf.while_loop(lambda k, *_: k < chunks, body, start,
                                                                    parallel_iterations=1)
    return ChunkedSums(sums, sq_norms.concat(), coefficients.concat(), dropped,
                       {name: values.concat() for name, values in sample.items()})
