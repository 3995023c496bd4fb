"""The DP gradient engine: loss terms in, privatized gradient out.

`DPGradientEngine.gradients(loss_fn, inputs)` runs the model's loss once under a tape,
clips what the aggregation mode says to clip, adds the Gaussian noise once for the global
batch and returns gradients ready for `optimizer.apply_gradients`:

  none      grad[(1/B) sum_i phi_i + (1/b) sum_j psi_j]               (no clipping, no noise)
  micro     (1/B)(sum_i pi_C(grad[phi_i + psi(batch)]) + N(0, (zC)^2))
  batch     pi_C(grad[(1/B) sum_i phi_i + psi(batch)]) + N(0, (zC)^2)
  termwise  (1/B)(sum_i pi_C1(grad phi_i) + N(0,(zC1)^2)) + (1/b)(sum_j pi_C2(grad psi_j) + N(0,(zC2)^2))
            the second noise only on the variables the batch-wise terms reach (`psi_reaches`)

B is the expected batch size q*N (a fixed denominator), b the number of partitions.
`DPConfig.clipping` only chooses how per-example gradients (or their norms) are obtained:
`fast` (ghost norms, `clipping.FastPass`), `per_example` (each example's loss alone under
`tf.vectorized_map`, `per_example.PerExamplePass`) or `vectorized` (`tape.jacobian`,
`clipping.VectorizedPass`); `auto` is `fast`, or `per_example` where `verify` finds `fast` not
exact; clip factors, weighted sums and noise are the same code for all.
An example (partition, batch group) with NaN/inf inputs or a NaN/inf gradient norm gets clip
factor exactly 0 and contributes exactly 0 (`docs/privacy.md`, "Non-finite and extreme examples").
Clipped sums are computed per replica; under a `tf.distribute` strategy every replica draws
the same noise from the shared generator state and only the first replica adds it, so the
all-reduced sum carries exactly one noise of the documented std, the same numbers one device
would add (independent of the number of replicas and workers).
"""
from __future__ import annotations

import contextlib
import math
import sys
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tfpriv.compat import converted
from tfpriv.errors import ConfigError
from tfpriv.privacy import pfor_rules, rules
from tfpriv.privacy.clipping import FastPass, VectorizedPass, jacobian, variables_dtype
from tfpriv.privacy.config import DPConfig, SINGLETON_PARTITIONS
from tfpriv.privacy.per_example import chunk_size, clipped_sums_by_chunk, per_example_pass
from tfpriv.privacy.rng import StreamGenerator, in_step, stream_generator
from tfpriv.privacy.taps import TapRecorder, clipping_problems, leaf_layers, require_layer_owned
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec

LossFn = Callable[[object, BatchLayout], LossTerms]
PUBLIC_SEED = 0  # of the public batch the engine is verified on (`public_batch`)
# (what is not exact, what to do) in `verify`'s refusals.
FAST_NOT_EXACT = ("fast clipping is not exact for this model", "the loss uses a variable outside its layer's "
                  "call or differentiates through the model twice: use clipping='per_example' or 'vectorized'")
PER_EXAMPLE_NOT_EXACT = ("per-example clipping is not exact for this model", "an example's loss as a batch of one "
                         "differs from its loss in the batch (batch-size-dependent terms or random numbers drawn in "
                         "the loss; pass randomness as per-example inputs): use clipping='vectorized'")
MIXES_EXAMPLES = ("DP engine: a sample-wise loss term depends on other examples in the batch "
                  "(e.g. BatchNormalization: tfpriv.fix_model(model) replaces it by GroupNormalization); "
                  "a DPModel term that mixes examples on purpose is declared batch-wise")
AUTO_NOT_EXACT = ("clipping='auto' finds no exact path for this model: neither fast nor per-example clipping is exact",
                  "an example's loss as a batch of one differs from its loss in the batch and the loss is not "
                  "first-order through each layer's call: clipping='vectorized' (per-example Jacobians, O(B^2) "
                  "work) is exact for a loss that does not mix examples")


def batch_size_of(inputs) -> tf.Tensor:
    return tf.shape(tf.nest.flatten(inputs)[0])[0]


def _clip_factors(sq: tf.Tensor, clip: float, keep: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """min(1, clip/||g||) from squared norms, 0 where not `keep` or not finite; and how many got 0."""
    keep = keep & tf.math.is_finite(sq)
    f = tf.minimum(tf.ones([], sq.dtype), clip / tf.maximum(tf.sqrt(tf.maximum(sq, 0.0)), 1e-12))
    return tf.where(keep, f, tf.zeros_like(f)), tf.reduce_sum(tf.cast(~keep, tf.float32))


def finite_examples(inputs, batch_size: tf.Tensor):
    """(inputs with the rows of examples holding a NaN/inf floating input set to 0, ok [B] bool).

    The engine drops those examples (clip factor 0). Zeroing them also keeps their NaN/inf out
    of Jacobians of the whole batch's forward pass, where activations * 0 would spread NaN to
    every other row. Every floating input tensor is taken to have a leading batch axis.
    """
    flat = [tf.convert_to_tensor(t) if isinstance(t, np.ndarray) else t for t in tf.nest.flatten(inputs)]
    rows = [i for i, t in enumerate(flat)
            if isinstance(t, tf.Tensor) and t.dtype.is_floating and (t.shape.rank or 0) >= 1]
    ok = tf.ones([batch_size], tf.bool)
    if not rows:
        return inputs, ok
    for i in rows:
        ok &= tf.reduce_all(tf.math.is_finite(flat[i]), axis=list(range(1, flat[i].shape.rank)))
    for i in rows:
        keep = tf.reshape(ok, [-1] + [1] * (flat[i].shape.rank - 1))
        flat[i] = tf.where(keep, flat[i], tf.zeros_like(flat[i]))
    return tf.nest.pack_sequence_as(inputs, flat), ok


def public_batch(batch, size: int = 8):
    """A batch of `size` public examples shaped like `batch`: the same structure, trailing shapes
    and dtypes, from a fixed seed; floating entries uniform in [0, 1), integer entries uniform in
    {0, 1} (ids within every Embedding's range, labels within any K >= 2 classes), boolean entries
    random, so the examples differ in every input and a loss that mixes them shows it (`verify`).

    What the engine checks before training (`verify`) runs on it, so that check reads no record:
    on real rows, one extreme record (3e38 features) could get a model refused, which would
    make the model's existence depend on that record (the check is outside epsilon).
    """
    rng = np.random.default_rng(PUBLIC_SEED)

    def like(t):
        t = tf.convert_to_tensor(t)
        shape = [size, *t.shape[1:]]
        if t.dtype.is_floating:
            return tf.constant(rng.random(shape), t.dtype)
        if t.dtype == tf.bool:
            return tf.constant(rng.random(shape) < 0.5)
        return tf.constant(rng.integers(0, 2, shape), t.dtype)
    return tf.nest.map_structure(like, batch)


def _first_replica() -> bool:
    """Whether this runs outside a strategy's replicas or in its first one (a per-replica call's
    replica id is a constant in eager mode, where `verify` runs)."""
    ctx = tf.distribute.get_replica_context()
    replica = None if ctx is None else tf.get_static_value(ctx.replica_id_in_sync_group)
    return replica is None or int(replica) == 0


# Variables of one dtype share a noise draw up to this many parameters: a draw per variable costs a
# key, a kernel and the Box-Muller ops each (the fixed per-step cost of a small model), one draw for a
# whole large model holds the Box-Muller temporaries of every parameter at once (peak memory).
NOISE_DRAW_PARAMETERS = 2**18


def _noise_draws(grads: Sequence[tf.Tensor]) -> list[list[int]]:
    """Indices of `grads` grouped into noise draws: consecutive same-dtype tensors up to
    `NOISE_DRAW_PARAMETERS` parameters together; a larger tensor alone."""
    draws: list[list[int]] = []
    size = 0
    for i, g in enumerate(grads):
        n = g.shape.num_elements()
        if draws and grads[draws[-1][0]].dtype == g.dtype and size + n <= NOISE_DRAW_PARAMETERS:
            draws[-1].append(i)
            size += n
        else:
            draws.append([i])
            size = n
    return draws


class DPGradientEngine:
    """Turns a model's loss terms into privatized gradients for its trainable variables.

    Args:
      config: the privatization settings.
      roots: the Keras model(s)/layer(s) whose trainable variables are trained.
      spec: names of the loss's sample-wise and batch-wise terms.
      variables: the variables to differentiate (default: all trainable variables of roots).
      loss_rng: the generator the loss draws from (`DPModel.rng`): an example (partition) whose
        gradient is recomputed alone replays its own draws of the step from it.

    Example:
        One DP-SGD gradient of a linear model's per-example squared output (`DPModel` does this
        in its train step):

        >>> import tensorflow as tf
        >>> from tfpriv.compat import keras
        >>> from tfpriv.privacy import DPConfig, DPGradientEngine, LossTerms, TermSpec
        >>> model = keras.Sequential([keras.layers.Input([3]), keras.layers.Dense(1)])
        >>> config = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=4,
        ...                   num_partitions=1, seed=0)
        >>> engine = DPGradientEngine(config, model, TermSpec(sample=("square",)))
        >>> def loss_fn(x, layout):
        ...     return LossTerms(sample={"square": tf.reduce_sum(tf.square(model(x)), axis=1)})
        >>> grads, logs = engine.gradients(loss_fn, tf.ones([4, 3]))
        >>> [g.shape.as_list() for g in grads]
        [[3, 1], [1]]
    """

    def __init__(self, config: DPConfig, roots: tf.Module | Sequence[tf.Module], spec: TermSpec,
                 variables: Sequence[tf.Variable] | None = None, loss_rng: StreamGenerator | None = None):
        if config.private and config.expected_batch_size is None:
            raise ConfigError("DP engine: private aggregation needs expected_batch_size (q*N, the fixed denominator)")
        self.config = config
        self.spec = spec
        roots = list(roots) if isinstance(roots, (list, tuple)) else [roots]
        self.variables = list(variables) if variables is not None else [
            v for r in roots for v in r.trainable_variables]
        if not self.variables:
            raise ConfigError("DP engine: the model has no trainable variables (build it before compiling)")
        variables_dtype(self.variables)  # one dtype, float32 or float64, or ConfigError naming `variables`
        self.batch_terms = config.batch_terms_active(spec.has_batch_terms)
        self._refuse_split_batch_terms(tf.distribute.get_strategy().num_replicas_in_sync)
        # Validates the mode against the terms now (e.g. micro + batch term needs max_batch_size).
        self.sensitivity = config.sensitivity(spec.has_batch_terms) if config.private else math.inf
        # The path per-example gradients take: `auto` starts as `fast`; `verify` may switch it to `per_example`.
        self.auto = config.private and config.clipping == "auto" and config.aggregation in ("micro", "termwise")
        self.clipping = "fast" if config.clipping == "auto" else config.clipping
        if self.auto and (problems := clipping_problems(roots, self.variables)):
            raise ConfigError(f"DP engine: clipping='auto' finds no exact path for this model: {'; '.join(problems)}")
        self.recorder = (TapRecorder(roots, self.variables)
                         if config.private and self.clipping == "fast" and config.aggregation != "batch" else None)
        if self.per_example:
            require_layer_owned(roots, self.variables)
        if config.private and config.clipping in ("per_example", "auto"):
            pfor_rules.remember_known_failures(self, leaf_layers(roots))
        self.generator = stream_generator(config.seed, "noise")
        self.loss_rng = loss_rng
        self._first_draw: int | None = None  # the loss stream's draw count when the step's loss pass began
        # Per variable, whether the batch-wise terms reach it in the traced graph: fixed by the first
        # pass and required of every later one, so the noise on each variable never depends on the data.
        self.psi_reaches: tuple[bool, ...] | None = None

    def _refuse_split_batch_terms(self, replicas: int) -> None:
        """Refuses cross-example clipping groups when a strategy splits the batch across replicas.

        Keras splits a batch by position, so each replica would clip its own share of the batch
        (batch mode, micro's psi(batch)) or its own partitions: adding one example can move a
        boundary example to the other replica and change two groups, more than the sensitivity
        the accountant uses (audit: ratios 1.59 batch, 1.42 termwise). Per-example groups
        (sample-wise terms, singleton partitions) do not depend on the split.
        """
        cfg = self.config
        if replicas <= 1 or not cfg.private:
            return
        groups = {"batch": "the batch's gradient is clipped as one group",
                  "micro": "every example's loss holds psi(batch)",
                  "termwise": "partitions would be formed per replica"}
        split = cfg.aggregation == "batch" or (self.batch_terms and (
            cfg.aggregation == "micro" or cfg.num_partitions != SINGLETON_PARTITIONS))
        if split:
            raise ConfigError(
                f"DP engine: aggregation={cfg.aggregation!r} clips groups of several examples "
                f"({groups[cfg.aggregation]}) and cannot run on {replicas} replicas: a strategy splits the batch "
                "by position, which changes the groups and the sensitivity. Use one replica, or termwise with "
                "num_partitions=0 (singleton partitions) or batch_clip=0", param="replicas")

    @property
    def per_example(self) -> bool:
        """Whether per-example gradients come from `tf.vectorized_map` (clipping="per_example")."""
        cfg = self.config
        return cfg.private and self.clipping == "per_example" and cfg.aggregation in ("micro", "termwise")

    # -- facts for accounting and results.json ------------------------------------------------
    @property
    def effective_noise_multiplier(self) -> float:
        return self.config.effective_noise_multiplier(self.spec.has_batch_terms)

    @property
    def noise_stddev(self) -> float:
        return self.config.noise_stddev(self.spec.has_batch_terms)

    # -- the gradient -------------------------------------------------------------------------
    def layout(self, batch_size: tf.Tensor) -> BatchLayout:
        b = self.config.partitions_for_batch_terms
        if b == 1:
            return BatchLayout.single(batch_size)
        return BatchLayout.random(batch_size, b, self.generator)

    def gradients(self, loss_fn: LossFn, inputs) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
        """Privatized gradients aligned with `self.variables`, plus logs: term means and `dropped`.

        An example (partition) with a NaN/inf input or a NaN/inf (overflowing) gradient norm gets
        clip factor 0 and contributes exactly 0; the accountant still counts it, and `dropped`
        is the number of examples plus partitions dropped (the batch size when `batch` mode
        drops its one group). Term means average finite values of undropped examples only.
        """
        loss_fn = converted(loss_fn)  # the caller's loss as AutoGraph runs it; the engine as written
        with in_step(self.generator), self._quiet():  # partitions and noise keyed by (step, draw, slot)
            return self._gradients(loss_fn, inputs)

    def _quiet(self):
        """`auto` does not log its paths at every trace: `verify` printed them once."""
        return pfor_rules.paths_taken() if self.auto else contextlib.nullcontext()

    def _gradients(self, loss_fn: LossFn, inputs):
        cfg = self.config
        batch_size = batch_size_of(inputs)
        layout = self.layout(batch_size)
        if cfg.aggregation in ("none", "batch"):
            return self._whole_batch_gradients(loss_fn, inputs, layout, batch_size)
        inputs, ok = finite_examples(inputs, batch_size)
        if self.clips_by_chunk:
            sums = self._sums_by_chunk(loss_fn, inputs, ok, batch_size, 1.0 / cfg.expected_batch_size)
            logs = self._logs(LossTerms(sample=sums.sample, batch={}), layout, batch_size, ok)
            logs["dropped"] = sums.dropped
            return self._add_noise(sums.sums), logs
        p, terms = self._pass(loss_fn, inputs, layout, batch_size)
        c_phi, c_psi, dropped = self._coefficients(p, batch_size, layout, ok)
        if c_psi is not None:
            self._fix_psi_reaches(p.psi_reaches)
        grads = p.weighted(c_phi / cfg.expected_batch_size,
                           None if c_psi is None else c_psi / self._psi_denominator(),
                           method=cfg.clipped_sum)
        logs = self._logs(terms, layout, batch_size, ok)
        logs["dropped"] = dropped
        return self._add_noise(grads, self.psi_reaches if c_psi is not None else None), logs

    def _fix_psi_reaches(self, reaches: Sequence[bool]) -> None:
        """Records which variables the batch-wise terms reach; refuses a loss whose reach changes.

        A variable they do not reach gets only the sample-wise noise (`DPConfig.noise_stddev`); the
        pass adds no batch-wise gradient to it. Privacy does not rest on the reach being right (a
        fixed set of coordinates left out of the psi sum is a data-independent projection, which does
        not raise its sensitivity), only on it being the same at every step.
        """
        reaches = tuple(bool(r) for r in reaches)
        if self.psi_reaches is None:
            self.psi_reaches = reaches
        elif reaches != self.psi_reaches:
            changed = [v.name for v, a, b in zip(self.variables, reaches, self.psi_reaches) if a != b]
            raise ConfigError(f"DP engine: the batch-wise terms reach different variables than on the first step "
                              f"({', '.join(changed[:3])}); the loss must use the same variables at every step")

    def _psi_denominator(self) -> float:
        if self.config.aggregation == "micro":
            return self.config.expected_batch_size
        return self.config.batch_term_denominator

    def _whole_batch_gradients(self, loss_fn, inputs, layout, batch_size):
        cfg = self.config
        with tf.GradientTape() as tape:
            terms = loss_fn(inputs, layout)
            phi = terms.sample_total()
            psi = terms.batch_total(layout.num_partitions)
            if cfg.private:
                denom_phi = cfg.expected_batch_size
                denom_psi = 1.0
            else:
                denom_phi = tf.cast(tf.maximum(batch_size, 1), phi.dtype)
                denom_psi = tf.cast(tf.maximum(layout.num_partitions, 1), psi.dtype)
            loss = tf.reduce_sum(phi) / denom_phi + tf.reduce_sum(psi) / denom_psi
        grads = tape.gradient(loss, self.variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        dropped = tf.constant(0.0)
        if cfg.private:
            grads = [tf.convert_to_tensor(g) for g in grads]
            norm = tf.linalg.global_norm(grads)
            # A NaN/inf (or overflowing) group gradient is dropped: noise only, not 0 * inf.
            ok = tf.math.is_finite(norm)
            scale = tf.minimum(1.0, cfg.l2_norm_clip / tf.maximum(norm, 1e-12))
            grads = self._add_noise([tf.where(ok, g * scale, tf.zeros_like(g)) for g in grads])
            dropped = tf.where(ok, 0.0, tf.cast(batch_size, tf.float32))
        logs = self._logs(terms, layout, batch_size)
        logs["dropped"] = dropped
        return grads, logs

    def _forward(self, loss_fn, inputs, layout, watch=(), persistent=True):
        """One recorded forward pass: (tape, terms, phi [B], psi [P] or None); the tape is persistent unless
        the caller takes one gradient from it (`persistent=False`): under a persistent tape TensorFlow
        builds each while loop's (a recurrent rule's `tf.scan`) forward and backward functions for
        higher-order gradients while tracing (0.5 s of an LSTM's first private fit)."""
        with tf.GradientTape(persistent=persistent) as tape:
            tape.watch(list(watch))
            if self.recorder is not None:
                with self.recorder.recording():
                    terms = loss_fn(inputs, layout)
            else:
                terms = loss_fn(inputs, layout)
            phi = terms.sample_total()
            psi = terms.batch_total(layout.num_partitions) if self.batch_terms else None
        return tape, terms, phi, psi

    def _pass(self, loss_fn, inputs, layout, batch_size):
        cfg = self.config
        self._first_draw = getattr(self.loss_rng, "calls", None)
        if self.per_example:
            p, terms = self._per_example_pass(loss_fn, inputs, layout, batch_size)
            return self._isolated_if_contaminated(p, loss_fn, inputs, layout, batch_size), terms
        # The fast path with sample-wise terms only and book-keeping sums differentiates once (`FastPass`).
        once = self.recorder is not None and not self.batch_terms and cfg.clipped_sum == "bookkeeping"
        tape, terms, phi, psi = self._forward(loss_fn, inputs, layout, persistent=not once)
        if self.recorder is not None:
            b = cfg.partitions_for_batch_terms
            rows = 1.0 if b == SINGLETON_PARTITIONS else cfg.expected_batch_size / b
            return FastPass(self.recorder, self.variables, tape, phi, psi, layout, batch_size, rows), terms
        p = VectorizedPass(self.variables, tape, phi, psi, layout, batch_size)
        return self._isolated_if_contaminated(p, loss_fn, inputs, layout, batch_size), terms

    def _isolated_if_contaminated(self, p, loss_fn, inputs, layout: BatchLayout, batch_size):
        """Rows of a Jacobian of one whole-batch forward pass, recomputed each alone if any is non-finite.

        The `vectorized` path's rows (and `per_example`'s rows of multi-example partitions) are
        gradients through one forward pass of the whole batch: an example whose finite inputs
        overflow inside the model (e.g. 3e38 features) has inf/NaN activations that the backward
        pass of every other row multiplies by a zero cotangent (0 * inf = NaN), so all rows would
        be dropped and one example could remove the whole sum. Then each example's phi (each
        partition's psi) is recomputed from a forward pass of its own rows alone, so only the
        culprit's row stays non-finite and only it is dropped. micro's psi(batch) holds every
        example by definition and is left as it is (dropping all is within its sensitivity).
        Within a step of the loss stream each recomputation replays its own rows' draws of the pass
        (`StreamGenerator.replaying`): the same random numbers, and none drawn anew, so how many
        examples were recomputed changes no later draw.
        """
        isolate_phi = isinstance(p, VectorizedPass)
        isolate_psi = p.j_psi is not None and self.config.aggregation == "termwise" and not (
            self.per_example and self.config.partitions_for_batch_terms == SINGLETON_PARTITIONS)
        if not (isolate_phi or isolate_psi):
            return p
        rows = (list(p.j_phi) if isolate_phi else []) + (list(p.j_psi) if isolate_psi else [])
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(j)) for j in rows])
        signature = [tf.TensorSpec(v.shape, v.dtype) for v in self.variables]

        start = self._first_draw

        def grads_of(x, n, which, rows, group=None):
            replay = (self.loss_rng.replaying(start, rows, group) if start is not None
                      else contextlib.nullcontext())
            with tf.GradientTape() as tape, replay:
                terms = loss_fn(x, BatchLayout.single(n))
                value = tf.reduce_sum(terms.sample_total() if which == "phi" else terms.batch_total(1))
            return tape.gradient(value, self.variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)

        # No AutoGraph (its control flow is Python's): on Python 3.13 TensorFlow 2.21's converted
        # nested function is called with an argument it does not take.
        @tf.autograph.experimental.do_not_convert
        def alone():
            out = []
            if isolate_phi:
                out += tf.map_fn(lambda i: grads_of(tf.nest.map_structure(lambda t: t[i:i + 1], inputs), 1, "phi",
                                                    tf.reshape(i, [1])),
                                 tf.range(batch_size), fn_output_signature=signature)
            if isolate_psi:
                def partition(j):
                    members = tf.boolean_mask(layout.index[j], layout.mask[j] > 0)
                    x = tf.nest.map_structure(lambda t: tf.gather(t, members), inputs)
                    return grads_of(x, tf.shape(members)[0], "psi", members, j)
                out += tf.map_fn(partition, tf.range(layout.num_partitions), fn_output_signature=signature)
            return out

        rows = tf.cond(finite, lambda: rows, alone)
        k = len(self.variables)
        if isolate_phi:
            p.j_phi, rows = rows[:k], rows[k:]
        if isolate_psi:
            p.j_psi = rows[:k]
        return p

    @property
    def clips_by_chunk(self) -> bool:
        """Whether each example's gradient is clipped and summed a chunk at a time (`clipped_sums_by_chunk`):
        per-example gradients of a loss with sample-wise terms only, whose clip factors need no other example,
        when a chunk is set or the expected batch's gradients exceed the automatic one (else the whole batch
        at once: a loop of one chunk traces slower, e.g. 1.5-2 s more for an LSTM taken one example after another)."""
        cfg = self.config
        return self.per_example and not self.spec.has_batch_terms and (
            cfg.per_example_chunk is not None or cfg.expected_batch_size > chunk_size(self.variables))

    def _sums_by_chunk(self, loss_fn, inputs, ok: tf.Tensor, batch_size, scale: float):
        clip = self.config.l2_norm_clip
        return clipped_sums_by_chunk(loss_fn, inputs, ok, self.variables, self.spec, batch_size,
                                     lambda sq, keep: _clip_factors(sq, clip, keep), scale,
                                     self.config.per_example_chunk
                                     or chunk_size(self.variables, self.config.expected_batch_size), owner=self)

    def _per_example_pass(self, loss_fn, inputs, layout, batch_size):
        singleton = self.config.partitions_for_batch_terms == SINGLETON_PARTITIONS
        return per_example_pass(loss_fn, inputs, self.variables, self.spec, layout, batch_size,
                                self.batch_terms, singleton, owner=self)

    def _coefficients(self, p, batch_size, layout: BatchLayout, ok: tf.Tensor):
        """Clip factors min(1, C/||g||) per example (and per partition), and the number dropped.

        ok [B]: examples whose inputs are finite. A group with a non-finite squared norm, or
        holding an example that is not ok, gets factor exactly 0 (dropped; it stays sampled,
        so the accountant is unchanged). micro with batch-wise terms drops every example when
        one is not ok, since psi(batch) holds it.
        """
        cfg = self.config
        if cfg.aggregation == "micro":
            if not self.batch_terms:
                c_phi, dropped = _clip_factors(p.sample_sq_norms(), cfg.l2_norm_clip, ok)
                return c_phi, None, dropped
            w, dropped = _clip_factors(p.micro_sq_norms(), cfg.l2_norm_clip, ok & tf.reduce_all(ok))
            # Batches above max_batch_size contribute nothing (noise only): keeps the
            # sensitivity at (2*max_batch_size - 1) * C whatever the sampled size.
            w *= tf.cast(batch_size <= cfg.max_batch_size, w.dtype)
            return w, tf.reshape(tf.reduce_sum(w), [1]), dropped
        c_phi, dropped = _clip_factors(p.sample_sq_norms(), cfg.l2_norm_clip, ok)
        if not self.batch_terms:
            return c_phi, None, dropped
        c_psi, dropped_psi = _clip_factors(p.partition_sq_norms(), cfg.batch_clip, self._partitions_ok(layout, ok))
        return c_phi, c_psi, dropped + dropped_psi

    @staticmethod
    def _partitions_ok(layout: BatchLayout, ok: tf.Tensor) -> tf.Tensor:
        """[P]: partitions all of whose examples are ok (empty partitions too)."""
        bad = tf.math.unsorted_segment_max(tf.cast(~ok, tf.int32), layout.partition_ids, layout.num_partitions)
        return bad <= 0

    def _add_noise(self, grads: list[tf.Tensor], psi_reaches: Sequence[bool] | None = None) -> list[tf.Tensor]:
        """grads + Gaussian noise: `noise_stddev` per coordinate, or the sample-wise part alone on a
        variable `psi_reaches` marks as not reached by the batch-wise terms."""
        has_batch = self.spec.has_batch_terms
        reaches = psi_reaches if psi_reaches is not None else [True] * len(grads)
        stds = [self.config.noise_stddev(has_batch, batch_terms_reach=r) for r in reaches]
        if not any(stds):
            return grads
        # The same draw on every replica (StreamGenerator.normal_once); the all-reduce sums the
        # replicas, so only the first adds it: one noise in total, never R of them.
        first = 1.0
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            first = tf.cast(tf.equal(ctx.replica_id_in_sync_group, 0), tf.float32)
        noisy = list(grads)
        for members in _noise_draws(grads):
            sizes = [grads[i].shape.num_elements() for i in members]
            z = self.generator.normal_once([sum(sizes)], dtype=grads[members[0]].dtype)
            for i, piece in zip(members, tf.split(z, sizes) if len(members) > 1 else [z]):
                noisy[i] = grads[i] + tf.reshape(piece, tf.shape(grads[i])) * tf.cast(stds[i] * first, grads[i].dtype)
        return noisy

    def _logs(self, terms: LossTerms, layout: BatchLayout, batch_size,
              ok: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Term means over examples (partitions); only finite values of examples that are `ok`
        (partitions holding only such examples) are averaged, so one bad example cannot make
        the progress bar NaN. Logs are not privatized."""
        ok = tf.ones([batch_size], tf.bool) if ok is None else ok

        def mean(v, keep):
            v = tf.convert_to_tensor(v)
            if v.shape.rank != 1:  # not one value per example (partition): finite values over its size
                total = tf.reduce_sum(tf.where(tf.math.is_finite(v), v, 0.0))
                return total / tf.cast(tf.maximum(tf.size(keep), 1), v.dtype)
            keep = keep & tf.math.is_finite(v)
            total = tf.reduce_sum(tf.where(keep, v, 0.0))
            return total / tf.maximum(tf.reduce_sum(tf.cast(keep, v.dtype)), 1.0)

        logs = {name: mean(v, ok) for name, v in terms.sample.items()}
        if terms.batch:
            parts_ok = self._partitions_ok(layout, ok)
            logs.update({name: mean(v, parts_ok) for name, v in terms.batch.items()})
        return logs

    # -- reference computations (tests, verification) -------------------------------------------
    def clipped_sums(self, loss_fn: LossFn, inputs, layout: BatchLayout | None = None) -> dict[str, object]:
        """Un-noised, un-normalised clipped sums and the norms they came from (for tests)."""
        with self._quiet():
            return self._clipped_sums(loss_fn, inputs, layout)

    def _clipped_sums(self, loss_fn: LossFn, inputs, layout: BatchLayout | None) -> dict[str, object]:
        batch_size = batch_size_of(inputs)
        layout = layout or self.layout(batch_size)
        inputs, ok = finite_examples(inputs, batch_size)
        if self.clips_by_chunk:
            sums = self._sums_by_chunk(loss_fn, inputs, ok, batch_size, 1.0)
            return {"sample": sums.sums, "layout": layout, "dropped": sums.dropped, "sample_sq_norms": sums.sq_norms,
                    "c_phi": sums.coefficients, "c_psi": None}
        p, _ = self._pass(loss_fn, inputs, layout, batch_size)
        c_phi, c_psi, dropped = self._coefficients(p, batch_size, layout, ok)
        out = {"sample": p.weighted(c_phi, None, method=self.config.clipped_sum), "layout": layout,
               "dropped": dropped}
        if c_psi is not None:
            self._fix_psi_reaches(p.psi_reaches)
            out["batch"] = p.weighted(tf.zeros_like(c_phi), c_psi, method=self.config.clipped_sum)
            out["psi_reaches"] = self.psi_reaches
            if self.config.aggregation == "micro":
                out["micro_sq_norms"] = p.micro_sq_norms()
            else:
                out["partition_sq_norms"] = p.partition_sq_norms()
        out["sample_sq_norms"] = p.sample_sq_norms()
        out["c_phi"], out["c_psi"] = c_phi, c_psi
        return out

    def verify(self, loss_fn: LossFn, inputs, max_examples: int = 8, rtol: float = 1e-3) -> None:
        """Refuses a model where the fast or per_example path would mis-clip (raises ConfigError);
        `auto` chooses its path here (`_choose_path`).

        Compares the path's per-example and per-partition norms with per-example Jacobians of
        the same forward pass, and checks that each sample-wise term depends on its own
        example only (no cross-example layers such as batch normalisation). `DPModel.prepare`
        passes a public batch (`public_batch`): whether a model trains never depends on a record.
        Examples are dealt to the partitions in turn, so several partitions hold several examples.
        """
        if self.config.aggregation in ("none", "batch"):
            return  # no per-example clipping to get wrong
        inputs = tf.nest.map_structure(lambda t: t[:max_examples], inputs)
        batch_size = batch_size_of(inputs)
        b = self.config.partitions_for_batch_terms
        layout = (self.layout(batch_size) if b in (1, SINGLETON_PARTITIONS)
                  else BatchLayout(tf.range(batch_size) % b, b))
        inputs, _ = finite_examples(inputs, batch_size)  # as in training: NaN/inf examples zeroed
        self._check_discrete_locality(loss_fn, inputs, layout)  # before the recorded pass: it records too
        float_inputs = [t for t in tf.nest.flatten(inputs) if t.dtype.is_floating]
        tape, _, phi, psi = self._forward(loss_fn, inputs, layout, watch=float_inputs)
        n = int(batch_size)
        # The path is compared with per-example Jacobians of the variables: one backward pass per
        # example gives each example's input rows and variable rows together.
        compared = self.auto or self.recorder is not None or self.per_example
        sources = float_inputs + (self.variables if compared else [])
        rows = jacobian(tape, phi, sources, use_pfor=False)[0] if sources else []
        for jac in rows[:len(float_inputs)]:
            jac = tf.reshape(jac, [n, n, -1]).numpy()
            off = np.abs(jac).sum(axis=2) * (1 - np.eye(n))
            if off.max() > 1e-6 * max(1.0, np.abs(jac).max()):
                raise ConfigError(MIXES_EXAMPLES)
        if not compared:
            return
        slow = VectorizedPass(self.variables, tape, phi, psi, layout, batch_size, use_pfor=False,
                              j_phi=rows[len(float_inputs):])
        if self.auto:
            self._choose_path(loss_fn, inputs, layout, batch_size, tape, phi, psi, slow, rtol)
            return
        if self.recorder is not None:
            checked = FastPass(self.recorder, self.variables, tape, phi, psi, layout, batch_size, 1.0)
            why = FAST_NOT_EXACT
        else:
            checked, _ = self._per_example_pass(loss_fn, inputs, layout, batch_size)
            why = PER_EXAMPLE_NOT_EXACT
        self._compare_norms(checked, slow, psi is not None, rtol, why)

    def _check_discrete_locality(self, loss_fn: LossFn, inputs, layout: BatchLayout) -> None:
        """Refuses a sample-wise term that reads other examples' integer or boolean inputs (ids,
        labels), which have no Jacobian: example 0's such entries are changed and every other
        example's loss must stay the same (all passes draw the same numbers from the loss stream).
        With layer rules the passes run the rules' forwards, as training does (an eager recurrent
        rule is T traced steps, Keras' own eager LSTM or GRU T times a dozen ops: 0.2-0.3 s less)."""
        flat = tf.nest.flatten(inputs)
        discrete = [i for i, t in enumerate(flat) if not t.dtype.is_floating and (t.shape.rank or 0) >= 1]
        n = batch_size_of(inputs)
        if not discrete or int(n) < 2:
            return
        changed = list(flat)
        for i in discrete:
            t = flat[i]
            first = tf.logical_not(t[:1]) if t.dtype == tf.bool else tf.where(
                t[:1] == tf.zeros([], t.dtype), tf.ones_like(t[:1]), tf.zeros_like(t[:1]))
            changed[i] = tf.concat([first, t[1:]], axis=0)
        passes = []
        with in_step(self.loss_rng):  # every pass draws the step's numbers from its first draw, by row
            start = getattr(self.loss_rng, "calls", None)
            for x in (inputs, inputs, tf.nest.pack_sequence_as(inputs, changed)):
                with (self.loss_rng.replaying(start, tf.range(n)) if start is not None else contextlib.nullcontext()), \
                        (self.recorder.recording() if self.recorder is not None else contextlib.nullcontext()):
                    passes.append(loss_fn(x, layout).sample_total().numpy()[1:])
        first, same = passes[0], self._same(passes[0], passes[1])
        # Rows whose loss changes between two identical passes (randomness outside the loss stream,
        # e.g. Dropout) cannot be compared; the Jacobian check still covers their float inputs.
        if not np.all(self._same(first, passes[2])[same]):
            raise ConfigError(MIXES_EXAMPLES)

    @staticmethod
    def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Element-wise: equal up to float32 round-off (NaN equals NaN)."""
        scale = float(np.max(np.abs(a[np.isfinite(a)]), initial=1.0))
        return np.isclose(a, b, rtol=1e-5, atol=1e-6 * scale, equal_nan=True)

    def _choose_path(self, loss_fn, inputs, layout: BatchLayout, batch_size, tape, phi, psi,
                     slow: VectorizedPass, rtol: float) -> None:
        """`auto`: keeps `fast` if its norms equal the per-example Jacobian's (`slow`), else switches to
        `per_example` if its norms do (else refuses); prints one line saying which path each layer takes."""
        with pfor_rules.paths_taken() as taken:
            fast = FastPass(self.recorder, self.variables, tape, phi, psi, layout, batch_size, 1.0)
            try:
                self._compare_norms(fast, slow, psi is not None, rtol, FAST_NOT_EXACT)
                line = self._layer_paths(taken)
            except ConfigError:
                self.recorder, self.clipping = None, "per_example"
                checked, _ = self._per_example_pass(loss_fn, inputs, layout, batch_size)
                self._compare_norms(checked, slow, psi is not None, rtol, AUTO_NOT_EXACT)
                line = (f"per-example ({taken.get('the model', 'vectorized')}) for the whole model (fast is not exact: "
                        "the loss uses a variable outside its layer's call or differentiates through the model twice)")
        if _first_replica():  # under MirroredStrategy every replica verifies; one line says it
            print(f"tfpriv: clipping auto: {line}", file=sys.stderr, flush=True)  # a log line, not the user's output

    def _layer_paths(self, taken: dict[str, str]) -> str:
        """'fast for a, b; per-example (map) for c': each layer the loss reaches, by its path (a rule's
        ghost norms or closed form, else its per-example gradients as `map_examples` ran them)."""
        groups: dict[str, list[str]] = {}
        layers = {id(tap.layer): tap.layer for tap in self.recorder.taps}
        for layer in layers.values():
            if self.recorder.rules[id(layer)] is not rules.FALLBACK:
                groups.setdefault("fast", []).append(layer.name)
            elif layer.name in taken:  # absent: no term reaches the layer
                groups.setdefault(f"per-example ({taken[layer.name]})", []).append(layer.name)
        order = ("fast", "per-example (vectorized)", "per-example (map)")
        return "; ".join(f"{path} for {', '.join(groups[path])}" for path in order if path in groups)

    def _compare_norms(self, checked, slow: VectorizedPass, with_psi: bool, rtol: float,
                       why: tuple[str, str]) -> None:
        """Raises ConfigError naming `why` unless `checked`'s norms equal the Jacobian path's."""
        checks = [("per-example", checked.sample_sq_norms(), slow.sample_sq_norms())]
        if with_psi:
            if self.config.aggregation == "micro":
                checks.append(("per-example (with batch terms)", checked.micro_sq_norms(), slow.micro_sq_norms()))
            else:
                checks.append(("per-partition", checked.partition_sq_norms(), slow.partition_sq_norms()))
            if list(checked.psi_reaches) != list(slow.psi_reaches):
                raise ConfigError(f"DP engine: {why[0]} (the variables the batch-wise terms reach differ from the "
                                  f"per-example Jacobian's); {why[1]}")
        for what, a, b in checks:
            # NaN or inf on both sides: both paths drop that example (partition).
            a, b = (np.where(np.isfinite(s), np.sqrt(np.maximum(s, 0)), np.inf) for s in (a.numpy(), b.numpy()))
            scale = float(np.max(b[np.isfinite(b)], initial=0.0))
            if not np.allclose(a, b, rtol=rtol, atol=1e-6 * max(1.0, scale)):
                raise ConfigError(f"DP engine: {why[0]} ({what} gradient norms {a[:4]} vs per-example "
                                  f"Jacobian {b[:4]}); {why[1]}")
