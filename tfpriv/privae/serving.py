"""PriVAE's trained model and its serving signatures: the VAE a run saves in `vae/`.

| signature | inputs | outputs |
|---|---|---|
| `encode` | `x` float32 [N, *data] | `mean`, `logvar` [N, D] |
| `decode` | `z` float32 [N, D] | `x`: the mean of p(x\\|z) |
| `sample` | `n` int32 [], `seed` int64 [] | `x` [n, *data] (prior draw, decoded) |
"""
from __future__ import annotations

import os

from tfpriv.errors import UsageError
from tfpriv.jobs.serving import N, SEED, Serving, function, spec
from tfpriv.privae.vae import VAE, VAE_CONFIG, load_vae
from tfpriv.run_folder import VAE_DIR

def load_run_vae(run_dir: str) -> VAE:
    """The VAE saved in `run_dir/vae` (PriVAE's trained model; a filter run's frozen stage-1 VAE)."""
    path = os.path.join(run_dir, VAE_DIR)
    if not os.path.isfile(os.path.join(path, VAE_CONFIG)):
        raise UsageError(f"run_dir: {run_dir} holds no trained VAE (missing {VAE_DIR}/{VAE_CONFIG}); a run saves "
                         "it after training")
    return load_vae(path)


def vae_functions(vae: VAE, sample: bool = True) -> dict:
    """`encode`, `decode` and (if `sample`) `sample` of a VAE."""
    data_shape = vae.encoder.inputs[0].shape[1:]

    def encode(x):
        mean, logvar = vae.encode(x)
        return {"mean": mean, "logvar": logvar}

    out = {"encode": function(encode, spec(data_shape, "x")),
           "decode": function(lambda z: {"x": vae.decode(z)}, spec([vae.latent_dim], "z"))}
    if sample:
        out["sample"] = function(lambda n, seed: {"x": vae.sample(n, seed)}, N, SEED)
    return out


def vae_variables(vae: VAE) -> list:
    return list(vae.encoder.variables) + list(vae.decoder.variables)


def serving(vae: VAE) -> Serving:
    """The VAE's signatures: encode, decode, sample."""
    return Serving(vae_functions(vae), vae_variables(vae))
