"""How a loss is privatized: aggregation mode, clip norms, noise, and the sensitivity they imply.

Every number the accountant sees comes from `DPConfig.effective_noise_multiplier`, which
divides the user's noise multiplier by the mode's true L2 sensitivity under add-or-remove-one
adjacency, measured in units of the clip norm(s). `docs/privacy.md` has the derivations.
"""
from __future__ import annotations

import dataclasses
import math

from tfpriv.errors import ConfigError

AGGREGATIONS = ("none", "micro", "batch", "termwise")
CLIPPING_METHODS = ("auto", "fast", "vectorized", "per_example")
CLIPPED_SUM_METHODS = ("bookkeeping", "reweight")
SINGLETON_PARTITIONS = 0  # `num_partitions=0`: every example is its own partition.


@dataclasses.dataclass(frozen=True)
class DPConfig:
    """Privatization settings for one model's gradient.

    Attributes:
      aggregation: `none` (non-private baseline through the same path), `micro` (DP-SGD,
        per-example clip of the whole per-example loss), `batch` (the whole batch's loss
        gradient clipped as one group), `termwise` (Algorithm 1 of the term-wise paper).
      l2_norm_clip: C for `micro`/`batch`; C1 (sample-wise terms) for `termwise`.
      batch_clip: C2, the clip norm of each partition's batch-wise gradient (`termwise`).
        0 drops the batch-wise terms from the gradient (they are still logged).
      noise_multiplier: z; each clipped block gets Gaussian noise of std z * (its clip norm).
      num_partitions: b, the number of disjoint partitions for batch-wise terms (`termwise`
        and `none`); `0` makes every example its own partition.
      expected_batch_size: q*N; the fixed denominator of sample-wise sums (never the
        realised batch size, which is data-dependent under Poisson sampling).
      max_batch_size: `micro` with batch-wise terms only: batches larger than this are
        skipped (noise only), which bounds the sensitivity by (2*max_batch_size - 1) * C.
      clipping: how per-example (per-partition) gradients are obtained. `auto` (the default): the
        fastest exact path, checked before training whatever `verify` says: `fast` (per layer: its
        ghost-norm rule, else per-example gradients of that layer alone, vectorized or one example
        after another), or `per_example` where the check finds `fast` not exact; it prints one line
        saying which path each layer takes and refuses, naming the layer, a model no path makes
        exact (BatchNormalization, stateful RNNs, variables no layer owns). `fast`: ghost norms +
        per-layer rules, vectorised fallback per layer; exact only for losses that
        differentiate through the model once. `per_example`: each example's loss evaluated
        as a batch of one and differentiated under `tf.vectorized_map` (O(B) work, exact for
        second-order losses such as gradient penalties; batch-wise terms of multi-example
        partitions via a Jacobian over the P partitions). `vectorized`: `tape.jacobian` of the
        batch's per-example losses (exact, but O(B^2) work). `docs/privacy.md` compares them.
      clipped_sum: `bookkeeping` (weighted sums from the first pass's layer inputs and
        output gradients) or `reweight` (a second backward pass of the reweighted loss).
      per_example_chunk: `per_example` clipping of sample-wise terms only: how many examples'
        gradients are computed, clipped and summed at once (memory against speed: the step holds
        this many examples' gradients and intermediates, never the whole batch's; chunks run one
        after another). None: where the expected batch's per-example gradients exceed 64 MiB, the
        expected batch in chunks of equal size holding at most that much; else the whole batch at
        once (most models).
      verify: check once, before training and on a public batch shaped like the first one (no
        record is read), that the fast or per_example path's norms equal a per-example Jacobian
        computation and that sample-wise terms are local (`auto` always checks: it chooses by it).
      seed: seed of the noise generator; None draws it from the OS.

    Example:
        DP-SGD: each example's gradient clipped at C = 1, Gaussian noise of std 1.1 * C on the sum.

        >>> import tfpriv
        >>> dp = tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1,
        ...                      expected_batch_size=64, num_partitions=1)
        >>> dp.private, dp.sensitivity(has_batch_terms=False), dp.effective_noise_multiplier(False)
        (True, 1.0, 1.1)
    """

    aggregation: str = "termwise"
    l2_norm_clip: float = 1.0
    batch_clip: float = 0.0
    noise_multiplier: float = 1.0
    num_partitions: int = 1
    expected_batch_size: float | None = None
    max_batch_size: int | None = None
    clipping: str = "auto"
    clipped_sum: str = "bookkeeping"
    per_example_chunk: int | None = None
    verify: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(f"aggregation: must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        if self.clipping not in CLIPPING_METHODS:
            raise ConfigError(f"clipping: must be one of {', '.join(CLIPPING_METHODS)}, got {self.clipping!r}")
        if self.clipped_sum not in CLIPPED_SUM_METHODS:
            raise ConfigError(f"clipped_sum: must be one of {', '.join(CLIPPED_SUM_METHODS)}, got {self.clipped_sum!r}")
        if self.per_example_chunk is not None and self.per_example_chunk < 1:
            raise ConfigError(f"per_example_chunk: must be >= 1 (or None: automatic), got {self.per_example_chunk}")
        if self.expected_batch_size is not None and not self.expected_batch_size > 0:
            raise ConfigError(f"expected_batch_size: must be > 0, got {self.expected_batch_size}")
        if self.num_partitions < 0:
            raise ConfigError(f"num_partitions: must be >= 1 (or 0 for one partition per example), got {self.num_partitions}")
        if self.expected_batch_size is not None and self.num_partitions > self.expected_batch_size:
            raise ConfigError(
                f"num_partitions: b={self.num_partitions} exceeds the expected batch size B={self.expected_batch_size:g}")
        if not self.private:
            return
        if not (math.isfinite(self.l2_norm_clip) and self.l2_norm_clip > 0):
            raise ConfigError(f"l2_norm_clip: must be a positive finite number, got {self.l2_norm_clip}")
        if not (math.isfinite(self.batch_clip) and self.batch_clip >= 0):
            raise ConfigError(f"batch_clip: must be a finite number >= 0, got {self.batch_clip}")
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0):
            raise ConfigError(f"noise_multiplier: must be a finite number >= 0, got {self.noise_multiplier}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ConfigError(f"max_batch_size: must be >= 1, got {self.max_batch_size}")

    @property
    def private(self) -> bool:
        return self.aggregation != "none"

    @property
    def partitions_for_batch_terms(self) -> int:
        """How many partitions batch-wise terms see: b for termwise/none, 1 (the batch) otherwise."""
        if self.aggregation in ("micro", "batch"):
            return 1
        return self.num_partitions

    def batch_terms_active(self, has_batch_terms: bool) -> bool:
        """Whether batch-wise terms contribute to the private gradient."""
        if not has_batch_terms:
            return False
        if self.aggregation == "termwise":
            return self.batch_clip > 0
        return True

    def sensitivity(self, has_batch_terms: bool) -> float:
        """L2 sensitivity of the noised sum(s) in units of the noise's clip norm.

        The whitened sensitivity: each clipped block is divided by its own clip norm before
        the noise (std z per coordinate in those units) is compared with it.
          micro, sample-wise only: 1 (one clipped example appears or disappears).
          micro with batch-wise terms: every example's loss holds psi(batch), so adding one
            example moves all B clipped gradients by up to 2C each plus its own C:
            2*B_max - 1 (term-wise paper, Prop. 3; B_max enforced by skipping larger batches).
          batch: the whole batch is one clipped group; adding an example moves it by up
            to 2C (TF Privacy's doubling for multi-example microbatches): 2.
          termwise: the example's own clipped phi-gradient (1) plus its partition's clipped
            psi-gradient, which moves by up to 2*C2 when the partition holds others
            (C2 when partitions are singletons): sqrt(1 + 2^2) or sqrt(1 + 1).
        """
        if not self.private:
            return math.inf
        batch = self.batch_terms_active(has_batch_terms)
        if self.aggregation == "micro":
            if not batch:
                return 1.0
            if self.max_batch_size is None:
                raise ConfigError(
                    "max_batch_size: aggregation=micro with a batch-wise term needs it; its sensitivity "
                    "grows with the batch size (term-wise paper, Prop. 3)")
            return 2.0 * self.max_batch_size - 1.0
        if self.aggregation == "batch":
            return 2.0
        if not batch:
            return 1.0
        partition_factor = 1.0 if self.num_partitions == SINGLETON_PARTITIONS else 2.0
        return math.sqrt(1.0 + partition_factor ** 2)

    def effective_noise_multiplier(self, has_batch_terms: bool) -> float:
        """Noise std divided by the true sensitivity: the sampled Gaussian the accountant sees."""
        if not self.private:
            return 0.0
        return self.noise_multiplier / self.sensitivity(has_batch_terms)

    def noise_multiplier_for(self, effective: float, has_batch_terms: bool) -> float:
        """Inverse of `effective_noise_multiplier`: the z that gives a target effective value."""
        return effective * self.sensitivity(has_batch_terms)

    def noise_stddev(self, has_batch_terms: bool, batch_terms_reach: bool = True) -> float:
        """Std of the Gaussian added to the final (normalised) gradient, per coordinate.

        termwise, eq. 16: (1/B)(sum + N(0,(z C1)^2)) + (1/b)(sum + N(0,(z C2)^2)), the two
        noises summed into one Gaussian of std z*sqrt((C1/B)^2 + (C2/b)^2). On a parameter the
        batch-wise terms do not reach (`batch_terms_reach=False`, e.g. a decoder's under a latent
        divergence) the psi sum is 0 on every dataset, so its noise is left out there: z*C1/B. The
        released pair (phi sum, psi sum on the reached coordinates) keeps its sensitivity.
        micro: z*C/B. batch: z*C (the clipped group is already a mean).
        """
        if not self.private:
            return 0.0
        z, c = self.noise_multiplier, self.l2_norm_clip
        if self.aggregation == "micro":
            return z * c / self.expected_batch_size
        if self.aggregation == "batch":
            return z * c
        sample_std = c / self.expected_batch_size
        if not (self.batch_terms_active(has_batch_terms) and batch_terms_reach):
            return z * sample_std
        batch_std = self.batch_clip / self.batch_term_denominator
        return z * math.hypot(sample_std, batch_std)

    @property
    def batch_term_denominator(self) -> float:
        """The fixed normaliser of the batch-wise sum: b, or the expected batch size for singletons."""
        b = self.partitions_for_batch_terms
        return self.expected_batch_size if b == SINGLETON_PARTITIONS else float(b)

    def replace(self, **changes) -> "DPConfig":
        return dataclasses.replace(self, **changes)
