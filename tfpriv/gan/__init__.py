"""Differentially private GANs: DP-WGAN-GP (Zhang et al. / 004) and DPGAN (Xie et al.).

Both train the critic through the DP engine (per-example clipped, noised gradient; one
Poisson-sampled Gaussian per critic step) and the generator non-privately from the critic.
"""
from tfpriv.gan.architectures import build_critic, build_generator
from tfpriv.gan.base import PrivateWGAN
from tfpriv.gan.dpgan import DPGAN, make_dpgan, privacy_comparison
from tfpriv.gan.wgan_gp import DPWGANGP, default_learning_rate, dp_adam, make_dpwgan_gp

__all__ = [
    "DPGAN", "DPWGANGP", "PrivateWGAN", "build_critic", "build_generator",
    "default_learning_rate", "dp_adam", "make_dpgan", "make_dpwgan_gp", "privacy_comparison",
]
