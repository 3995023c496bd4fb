"""PriVAE: the VAE model, priors, divergences and built-in architectures."""
from tfpriv.privae.divergences import CauchyMMD, Divergence, KLPriorToAggregate
from tfpriv.privae.priors import GaussianMixture, Prior, SparseMixture, StandardNormal
from tfpriv.privae.vae import VAE, load_vae

__all__ = ["CauchyMMD", "Divergence", "GaussianMixture", "KLPriorToAggregate", "Prior", "SparseMixture",
           "StandardNormal", "VAE", "load_vae"]
