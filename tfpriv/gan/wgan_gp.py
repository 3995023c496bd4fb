"""DP-WGAN-GP (Zhang et al. 2018, as corrected by Schwabedal et al. 004, Algorithm 2).

Critic loss of example i (Gulrajani et al. eq. 3, per example):
  phi_i = [D(fake_i) - D(real_i)] + lambda (||grad_x D(xhat_i)||_2 - 1)^2,
  xhat_i = m_i real_i + (1 - m_i) fake_i,  m_i ~ U(0, 1),
declared as two sample-wise terms ("wasserstein", "penalty") whose sum the engine clips jointly.
The penalty differentiates through the critic twice, so fast (ghost-norm) clipping is not exact
for it: the model refuses `clipping="fast"`. Use `clipping="per_example"` (the CLI default: each
example's loss differentiated alone under `tf.vectorized_map`, O(B)) or `"vectorized"` (the
engine's `tape.jacobian`, exact too but O(B^2)).
Critic optimizer: DP-Adam, i.e. Adam (beta1 0.5, beta2 0.9) on the privatized gradient, with
004's learning rate batch * 3.125e-6.
"""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.architectures import IMAGE_SHAPE, build_critic, build_generator, generator_width
from tfpriv.gan.base import PrivateWGAN
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import TermSpec

GP_WEIGHT = 10.0
ADAM_BETAS = (0.5, 0.9)
LR_PER_EXAMPLE = 3.125e-6


def default_learning_rate(batch_size: float) -> float:
    """004's learning rate: batch * 3.125e-6 (4e-4 at batch 128)."""
    return float(batch_size) * LR_PER_EXAMPLE


def dp_adam(learning_rate: float | keras.optimizers.schedules.LearningRateSchedule,
            ema: float = 0.0) -> keras.optimizers.Optimizer:
    """Adam with 004's betas; applied to the privatized gradient it is DP-Adam.

    ema > 0 keeps an exponential moving average of the variables (for the generator: it is
    post-processing of the private critic, so it costs no privacy); apply it with
    `optimizer.finalize_variable_values(variables)`.
    """
    return keras.optimizers.Adam(learning_rate, beta_1=ADAM_BETAS[0], beta_2=ADAM_BETAS[1],
                                    use_ema=ema > 0, ema_momentum=ema if ema > 0 else 0.99)


def gradient_penalty(critic_fn, xhat: tf.Tensor) -> tf.Tensor:
    """(||grad_x D(xhat_i)||_2 - 1)^2 per example [B]; row i of the gradient is D(xhat_i)'s alone
    because the critic has no cross-example layers."""
    with tf.GradientTape() as tape:
        tape.watch(xhat)
        values = critic_fn(xhat)
    grad = tape.gradient(values, xhat)
    norm = tf.sqrt(tf.reduce_sum(tf.reshape(tf.square(grad), [tf.shape(grad)[0], -1]), axis=1) + 1e-12)
    return tf.square(norm - 1.0)


class DPWGANGP(PrivateWGAN):
    """WGAN-GP with a per-example clipped, noised critic gradient; non-private generator steps."""

    spec = TermSpec(sample=("wasserstein", "penalty"))

    def __init__(self, generator, critic, gp_weight: float = GP_WEIGHT, **kwargs):
        super().__init__(generator, critic, **kwargs)
        if not gp_weight >= 0:
            raise ConfigError(f"--gp_weight: must be >= 0, got {gp_weight}")
        self.gp_weight = float(gp_weight)

    def check_config(self, dp: DPConfig) -> None:
        if dp.private and dp.clipping == "fast" and self.gp_weight > 0:
            raise ConfigError("--clipping: the gradient penalty differentiates through the critic twice, so fast "
                              "(ghost-norm) clipping would mis-clip it; use per_example (or vectorized)")

    def critic_terms(self, real, fake, labels, mix):
        critic_fn = lambda x: self.critic(self._critic_in(x, labels), training=True)  # noqa: E731
        if self.gp_weight == 0:
            wasserstein = critic_fn(fake) - critic_fn(real)
            return {"wasserstein": wasserstein, "penalty": tf.zeros_like(wasserstein)}
        # With the penalty, clipping is per-example (`check_config`): the fakes and real images in one call
        # make each layer's per-example gradient of the Wasserstein term one product over the example's two
        # rows, not two summed (the private step 13 % faster at B = 64). Fast clipping takes a layer call's
        # rows as the examples, so the calls stay apart without the penalty.
        n = tf.shape(real)[0]
        scores = self.critic(self._critic_in(tf.concat([fake, real], 0),
                                             None if labels is None else tf.concat([labels, labels], 0)), training=True)
        m = tf.reshape(mix, [-1, 1, 1, 1])
        penalty = gradient_penalty(critic_fn, m * real + (1.0 - m) * fake)
        return {"wasserstein": scores[:n] - scores[n:], "penalty": self.gp_weight * penalty}


def make_dpwgan_gp(capacity: int = 32, latent_size: int = 128, num_classes: int | None = None,
                   critic_steps: int = 1, gp_weight: float = GP_WEIGHT, seed: int | None = None,
                   generator_batch_size: int | None = None, generator_capacity: int | None = None,
                   diversity_weight: float = 0.0, saturation_bound: float = 0.0,
                   noise_multiplicity: int = 1, image_shape: tuple[int, int, int] = IMAGE_SHAPE) -> DPWGANGP:
    """The source paper's architecture at `capacity` (the generator at `generator_capacity`, default the
    same), optionally class-conditional; `diversity_weight`, `saturation_bound`: the generator's mode-seeking
    term and saturation penalty; `noise_multiplicity`: fakes and interpolation weights per example in the
    critic's loss (`PrivateWGAN`)."""
    return DPWGANGP(build_generator(generator_width(capacity, generator_capacity), latent_size, num_classes, image_shape),
                    build_critic(capacity, num_classes, image_shape),
                    gp_weight=gp_weight, latent_size=latent_size, num_classes=num_classes,
                    critic_steps=critic_steps, seed=seed, generator_batch_size=generator_batch_size,
                    diversity_weight=diversity_weight, saturation_bound=saturation_bound,
                    noise_multiplicity=noise_multiplicity, name="dpwgan_gp")
