"""DPGAN (Xie et al. 2018, paper 002): a WGAN critic with weight clipping and a noised gradient.

Critic loss of example i: D(fake_i) - D(real_i). After every (noised) critic update the weights
are clipped to [-c_p, c_p] (post-processing). Xie et al. add N(0, sigma_n^2 c_g^2 I) to the
averaged gradient, where c_g is a per-example gradient bound they derive from bounded weights,
activations and inputs; tfpriv does not rely on that derivation: the engine clips every
example's critic gradient at c_g (= l2_norm_clip C), so the reported epsilon holds for any
data. The loss has no second-order term, so the fast (ghost-norm) path is exact here.
Optimizer: RMSProp as in WGAN (lr 5e-5, c_p = 0.01).

`gan_loss="logistic"` swaps the Wasserstein loss for the standard GAN loss of Bie et al. 2023
("Private GANs, revisited"): critic loss softplus(-D(real_i)) + softplus(D(fake_i)) (the
cross-entropy of a real/fake classifier with logit D), non-saturating generator loss
softplus(-D(G(z))). That loss needs no Lipschitz constraint, so weight clipping may be off
(`weight_clip=0`); it too differentiates through the critic once, so fast clipping stays exact.
"""
from __future__ import annotations

import math

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.architectures import IMAGE_SHAPE, build_critic, build_generator, generator_width
from tfpriv.gan.base import PrivateWGAN
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.terms import TermSpec

WEIGHT_CLIP = 0.01
LEARNING_RATE = 5e-5
GAN_LOSSES = ("wasserstein", "logistic")


class DPGAN(PrivateWGAN):
    """Weight-clipped WGAN (or logistic GAN) whose critic gradient is per-example clipped at c_g and noised."""

    def __init__(self, generator, critic, weight_clip: float = WEIGHT_CLIP, gan_loss: str = "wasserstein", **kwargs):
        super().__init__(generator, critic, **kwargs)
        if gan_loss not in GAN_LOSSES:
            raise ConfigError(f"gan_loss: must be one of {', '.join(GAN_LOSSES)}, got {gan_loss!r}")
        if not (math.isfinite(weight_clip) and weight_clip >= 0):
            raise ConfigError(f"weight_clip: must be a finite number >= 0 (0: off), got {weight_clip}")
        if gan_loss == "wasserstein" and weight_clip == 0:
            raise ConfigError("weight_clip: the Wasserstein critic needs weight clipping (> 0) to stay Lipschitz; "
                              "0 (off) only with gan_loss='logistic'")
        self.weight_clip = float(weight_clip)
        self.gan_loss = gan_loss
        self.spec = TermSpec(sample=(gan_loss,))

    def critic_terms(self, real, fake, labels, mix):
        d_fake = self.critic(self._critic_in(fake, labels), training=True)
        d_real = self.critic(self._critic_in(real, labels), training=True)
        if self.gan_loss == "logistic":
            return {"logistic": tf.nn.softplus(-d_real) + tf.nn.softplus(d_fake)}
        return {"wasserstein": d_fake - d_real}

    def generator_loss(self, scores: tf.Tensor) -> tf.Tensor:
        return tf.nn.softplus(-scores) if self.gan_loss == "logistic" else -scores

    def metric_names(self) -> list[str]:
        return ["d_loss"] + self.generator_metric_names() if self.gan_loss == "logistic" else super().metric_names()

    def step_logs(self, logs: dict) -> dict:
        if self.gan_loss == "logistic":
            logs.update(d_loss=logs["logistic"])
            return logs
        return super().step_logs(logs)

    def after_critic_update(self) -> None:
        if self.weight_clip > 0:
            for v in self.critic.trainable_variables:
                v.assign(tf.clip_by_value(v, -self.weight_clip, self.weight_clip))


def make_dpgan(capacity: int = 32, latent_size: int = 128, num_classes: int | None = None,
               critic_steps: int = 5, weight_clip: float = WEIGHT_CLIP, seed: int | None = None,
               generator_batch_size: int | None = None, gan_loss: str = "wasserstein",
               generator_capacity: int | None = None, diversity_weight: float = 0.0, saturation_bound: float = 0.0,
               noise_multiplicity: int = 1, image_shape: tuple[int, int, int] = IMAGE_SHAPE) -> DPGAN:
    """DPGAN on the same critic/generator architecture as DP-WGAN-GP (generator at `generator_capacity`,
    default `capacity`; `diversity_weight`, `saturation_bound`: the generator's mode-seeking term and
    saturation penalty; `noise_multiplicity`: fakes per example in the critic's loss; see `PrivateWGAN`)."""
    return DPGAN(build_generator(generator_width(capacity, generator_capacity), latent_size, num_classes, image_shape),
                 build_critic(capacity, num_classes, image_shape),
                 weight_clip=weight_clip, gan_loss=gan_loss, latent_size=latent_size, num_classes=num_classes,
                 critic_steps=critic_steps, seed=seed, generator_batch_size=generator_batch_size,
                 diversity_weight=diversity_weight, saturation_bound=saturation_bound,
                 noise_multiplicity=noise_multiplicity, name="dpgan")


def rmsprop(learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = LEARNING_RATE,
            ema: float = 0.0) -> keras.optimizers.Optimizer:
    """WGAN's optimizer; ema > 0 as in `tfpriv.gan.wgan_gp.dp_adam`."""
    return keras.optimizers.RMSprop(learning_rate, use_ema=ema > 0, ema_momentum=ema if ema > 0 else 0.99)


def xie_sigma_n(epsilon: float, q: float, critic_steps: int, delta: float) -> float:
    """Xie et al.'s sigma_n = 2 q sqrt(n_d log(1/delta)) / epsilon (per outer loop)."""
    return 2.0 * q * math.sqrt(critic_steps * math.log(1.0 / delta)) / epsilon


def xie_epsilon(sigma_n: float, q: float, critic_steps: int, delta: float) -> float:
    """The epsilon that formula assigns to one outer loop at noise sigma_n."""
    return 2.0 * q * math.sqrt(critic_steps * math.log(1.0 / delta)) / sigma_n if sigma_n > 0 else math.inf


def privacy_comparison(noise_multiplier: float, q: float, critic_steps: int, delta: float,
                       expected_batch_size: float, total_critic_steps: int) -> dict:
    """Our RDP epsilon next to Xie et al.'s per-outer-loop formula, in both readings of sigma_n.

    Our noise on the averaged gradient has std z C / B. Xie et al. write the noise on the
    averaged gradient as sigma_n c_g, so with c_g = C their sigma_n is z / B ("on the mean");
    read as a noise multiplier of the clipped sum (as in Abadi et al.) it is z ("on the sum").
    """
    z = noise_multiplier
    return {
        "rdp_epsilon_run": RDP.epsilon([(q, z, total_critic_steps)], delta),
        "rdp_epsilon_one_outer_loop": RDP.epsilon([(q, z, critic_steps)], delta),
        "xie_epsilon_one_outer_loop_sigma_on_mean": xie_epsilon(z / expected_batch_size, q, critic_steps, delta),
        "xie_epsilon_one_outer_loop_sigma_on_sum": xie_epsilon(z, q, critic_steps, delta),
        "xie_sigma_n_for_rdp_epsilon_one_outer_loop": xie_sigma_n(
            max(RDP.epsilon([(q, z, critic_steps)], delta), 1e-12), q, critic_steps, delta),
    }
