"""Batch-wise divergences D(q(z), p(z)): psi(s_j) of the term-wise paper, one value per partition.

A divergence sees only its partition's rows (`BatchLayout.gather` output [P, M, D] with a
mask [P, M]); the engine clips each partition's gradient separately. Adding a divergence is
one small subclass implementing `__call__`.
"""
from __future__ import annotations

import math

import tensorflow as tf

from tfpriv.errors import ConfigError
from tfpriv.metrics.kernels import DEFAULT_SCALES, cauchy_mmd
from tfpriv.privae.priors import Prior
from tfpriv.privacy.rng import slots

LOG_2PI = math.log(2.0 * math.pi)


class Divergence:
    """psi(s_j): one value per partition, a function of that partition's rows and of randomness
    drawn for it alone (so adding an example changes the distribution of one partition's term):
    prior samples come from `slots(rng, P)`, so partition j's k-th sample is keyed by (j, k)."""

    name = "divergence"
    prior_samples: int | None = None  # per partition; None: as many as the partition has members

    def prior_draws(self, z: tf.Tensor, prior: Prior, rng: tf.random.Generator | None) -> tf.Tensor:
        """[P, m, D] prior samples for the partitions of z [P, M, D]: m = `prior_samples`, else M (the
        caller masks the draws of empty slots). They carry no private data and are i.i.d., keyed by
        (partition, slot): partition j's draws are the same whatever the other partitions hold."""
        parts, rows = tf.shape(z)[0], tf.shape(z)[1]
        m = rows if self.prior_samples is None else self.prior_samples
        return tf.reshape(prior.sample(parts * m, rng=slots(rng, parts)), [parts, m, prior.latent_dim])

    def __call__(self, z: tf.Tensor, mean: tf.Tensor, logvar: tf.Tensor, mask: tf.Tensor, prior: Prior,
                 rng: tf.random.Generator | None = None) -> tf.Tensor:
        """Per-partition divergence [P] from codes z, posterior params (all [P, M, D]) and mask [P, M];
        prior samples come from `rng` (the model's training stream) when given."""
        raise NotImplementedError

    def config(self) -> dict:
        return {"name": self.name}


class CauchyMMD(Divergence):
    """Dimension-wise MMD with a sum of Cauchy kernels against fresh prior samples (Fig. 1).

    Partition j is compared with `prior_samples` prior draws, or (None) with as many draws as
    it has members |s_j|: never a number that depends on another partition (e.g. the largest),
    which would let one example change every partition's term (docs/privacy.md).
    """

    name = "mmd"

    def __init__(self, scales=DEFAULT_SCALES, prior_samples: int | None = None):
        self.scales = tuple(float(s) for s in scales)
        if prior_samples is not None and prior_samples < 2:
            raise ConfigError(f"prior_samples: must be >= 2 (the unbiased MMD needs two), got {prior_samples}")
        self.prior_samples = prior_samples

    def __call__(self, z, mean, logvar, mask, prior, rng=None):
        y = self.prior_draws(z, prior, rng)  # the first |s_j| of row j: |s_j| independent draws
        y_mask = mask if self.prior_samples is None else None
        value = cauchy_mmd(z, y, x_mask=mask, y_mask=y_mask, scales=self.scales)
        return value * tf.cast(tf.reduce_sum(mask, axis=1) > 0, value.dtype)

    def config(self):
        return {"name": self.name, "scales": list(self.scales), "prior_samples": self.prior_samples}


class KLPriorToAggregate(Divergence):
    """KL(p(z) ‖ q(z)) over a partition, q(z) = (1/|s|) sum_i q(z|x_i) (Fig. 2).

    Interpretation of the paper's `sum_j (log p(z_j) - log sum_i q(z_j|x_i))`: z_j are |s|
    samples from the prior (so the sum estimates |s| * KL(p‖q)), and the aggregate posterior
    uses a mean, not a sum, over the partition's members, so the estimate is a KL (the two
    differ by the constant |s| log|s|, which has no gradient).

    With `prior_samples=m` each partition draws m prior samples of its own instead of |s_j|
    and the term is |s_j| times their mean, the same expectation with less variance from the
    prior draws (with |s_j| = 5 draws from a 4-component mixture a component is often not drawn
    at all, and its codes get no pull that step). m is a constant, so partition j's term still
    depends only on s_j and its own draws.
    """

    name = "kl_pq"

    def __init__(self, prior_samples: int | None = None):
        if prior_samples is not None and prior_samples < 1:
            raise ConfigError(f"prior_samples: must be >= 1, got {prior_samples}")
        self.prior_samples = prior_samples

    def __call__(self, z, mean, logvar, mask, prior, rng=None):
        # Default: one prior sample per member (masked below), so partition j's term uses |s_j| draws.
        zp = self.prior_draws(z, prior, rng)  # [P, m, D]
        var = tf.exp(logvar)
        # log q(z_j | x_i) for prior sample j and member i: [P, m(j), M(i)]
        diff = zp[:, :, None, :] - mean[:, None, :, :]
        log_q = -0.5 * tf.reduce_sum(LOG_2PI + logvar[:, None] + tf.square(diff) / var[:, None], axis=-1)
        member = mask[:, None, :]
        log_q = tf.where(member > 0, log_q, tf.fill(tf.shape(log_q), -1e30))
        size = tf.reduce_sum(mask, axis=1)
        count = tf.maximum(size, 1.0)
        log_agg = tf.reduce_logsumexp(log_q, axis=-1) - tf.math.log(count)[:, None]       # [P, m]
        term = prior.log_prob(zp) - log_agg
        if self.prior_samples is None:
            return tf.reduce_sum(term * mask, axis=1)          # one prior sample per member
        return size * tf.reduce_mean(term, axis=1)

    def config(self):
        return {"name": self.name, "prior_samples": self.prior_samples}


DIVERGENCES = {"mmd": CauchyMMD, "kl_pq": KLPriorToAggregate}


def make_divergence(name: str | None, prior_samples: int | None = None) -> Divergence | None:
    """The divergence called `name` (None for none), drawing `prior_samples` prior samples per
    partition (None: as many as the partition has members)."""
    if name in (None, "", "none"):
        if prior_samples is not None:
            raise ConfigError("prior_samples: only applies with a divergence, got regularizer none")
        return None
    if name not in DIVERGENCES:
        raise ConfigError(f"regularizer: must be one of none, {', '.join(DIVERGENCES)}, got {name!r}")
    return DIVERGENCES[name](prior_samples=prior_samples)


def divergence_from_config(config: dict | None) -> Divergence | None:
    if not config:
        return None
    config = dict(config)
    cls = DIVERGENCES[config.pop("name")]
    return cls(**config)
