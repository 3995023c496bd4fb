"""`--model=privae`: train a (private) VAE, evaluate it, write results.json and figures."""
from __future__ import annotations

import os
import time

import numpy as np
import tensorflow as tf
from absl import flags

from tfpriv.data import load_dataset
from tfpriv.data.pinwheel import SCALE as PINWHEEL_SCALE
from tfpriv.data.pinwheel import check_scale, load_pinwheel
from tfpriv.data.uci import resolve_feature_scaling
from tfpriv.errors import ConfigError, UsageError
from tfpriv.models.architectures import PINWHEEL_HIDDEN, build_architecture, parse_hidden
from tfpriv.models.divergences import make_divergence
from tfpriv.models.evaluation import encode_all, evaluate_vae
from tfpriv.models.plots import image_grid, pinwheel_figure
from tfpriv.models.priors import GaussianMixture, make_prior
from tfpriv.models.vae import VAE, load_vae
from tfpriv.privacy.config import DPConfig
from tfpriv.training.results import write_results
from tfpriv.training.runner import fit_private, plan_privacy, read_ledger

flags.DEFINE_string("prior", "sparse", "Latent prior: normal, sparse (spike-and-slab), mixture (4 Gaussians at {0,1}^2).")
flags.DEFINE_string("regularizer", "mmd", "Batch-wise divergence: none, mmd (Cauchy-kernel MMD), kl_pq (KL(p||q)).")
flags.DEFINE_integer("num_samples_L", 1, "L: reparameterised samples per example in the reconstruction term.")
flags.DEFINE_string("architecture", "auto", "Encoder/decoder: auto, conv (28x28), mlp, pinwheel.")
flags.DEFINE_string("pinwheel_hidden", ",".join(map(str, PINWHEEL_HIDDEN)),
                    "--architecture=pinwheel: hidden widths of the encoder (comma-separated; mirrored in the decoder).")
flags.DEFINE_float("pinwheel_scale", PINWHEEL_SCALE,
                   "--dataset=pinwheel: the generator's output scale (10 in Johnson et al.; 1 = arms of radius ~1). "
                   "A fixed constant of the generator, not computed from the data.")
flags.DEFINE_string("likelihood", "auto", "p(x|z): auto, bernoulli (data in [0,1]) or gaussian.")
flags.DEFINE_float("obs_std", 1.0, "Std of the Gaussian likelihood.")
flags.DEFINE_float("prior_sigma", 0.03, "Component std of the mixture prior.")
flags.DEFINE_float("prior_gamma", 0.8, "Spike weight gamma of the sparse prior.")
flags.DEFINE_float("prior_sigma0_sq", 0.05, "Spike variance sigma0^2 of the sparse prior.")
flags.DEFINE_string("optimizer", "adam", "sgd or adam.")
flags.DEFINE_integer("eval_importance_samples", 100, "K: importance samples for the test log-likelihood.")
flags.DEFINE_integer("eval_examples", 2000, "Held-out examples used for metrics (0 = all).")
if "num_samples" not in flags.FLAGS:  # the GAN job defines the same flag
    flags.DEFINE_integer("num_samples", 64, "--mode=sample: how many samples to draw.")

FLAGS = flags.FLAGS

DEFAULT_LATENT = {"digits": 8, "mnist": 50, "fashion_mnist": 50, "pinwheel": 2, "adult": 10, "abalone": 4}


def _optimizer(name: str, lr: float) -> tf.keras.optimizers.Optimizer:
    if not lr > 0:
        raise ConfigError(f"--learning_rate: must be > 0, got {lr}")
    if name == "sgd":
        return tf.keras.optimizers.SGD(lr)
    if name == "adam":
        return tf.keras.optimizers.Adam(lr)
    raise ConfigError(f"--optimizer: must be sgd or adam, got {name!r}")


def build_vae(dataset, latent_dim: int) -> VAE:
    arch = FLAGS.architecture
    shape = dataset.x_train.shape[1:]
    if arch == "auto":
        arch = "conv" if tuple(shape[:2]) == (28, 28) else ("pinwheel" if dataset.kind == "points" else "mlp")
    likelihood = dataset.likelihood if FLAGS.likelihood == "auto" else FLAGS.likelihood
    kwargs = {}
    if FLAGS.prior == "mixture":
        kwargs["sigma"] = FLAGS.prior_sigma
    elif FLAGS.prior == "sparse":
        kwargs.update(gamma=FLAGS.prior_gamma, sigma0_sq=FLAGS.prior_sigma0_sq)
    prior = make_prior(FLAGS.prior, latent_dim, **kwargs)
    regularizer = make_divergence(FLAGS.regularizer)
    if arch != "pinwheel" and FLAGS["pinwheel_hidden"].present:
        raise ConfigError(f"--pinwheel_hidden: only applies to --architecture=pinwheel, got --architecture={arch}")
    encoder, decoder = build_architecture(arch, shape, latent_dim, pinwheel_hidden=FLAGS.pinwheel_hidden)
    alpha = FLAGS.alpha if regularizer is not None else 0.0
    return VAE(encoder, decoder, prior=prior, likelihood=likelihood, beta=FLAGS.beta, alpha=alpha,
               regularizer=regularizer, num_samples=FLAGS.num_samples_L, obs_std=FLAGS.obs_std)


def run(output_dir: str) -> dict:
    if FLAGS.seed is not None:
        tf.keras.utils.set_random_seed(FLAGS.seed)
    for flag in ("eval_importance_samples", "num_samples_L"):
        if getattr(FLAGS, flag) < 1:
            raise UsageError(f"--{flag}: must be >= 1, got {getattr(FLAGS, flag)}")
    parse_hidden(FLAGS.pinwheel_hidden)  # fail before loading data or planning privacy
    # adult/abalone: public constants when the VAE is trained privately (train statistics are refused then)
    feature_scaling = resolve_feature_scaling(FLAGS.feature_scaling, FLAGS.dataset, private=FLAGS.aggregation != "none")
    if FLAGS.dataset == "pinwheel":
        dataset = load_pinwheel(FLAGS.data_dir, seed=FLAGS.seed or 0, scale=check_scale(FLAGS.pinwheel_scale))
    elif FLAGS["pinwheel_scale"].present:
        raise UsageError(f"--pinwheel_scale: only applies to --dataset=pinwheel, got --dataset={FLAGS.dataset}")
    else:
        dataset = load_dataset(FLAGS.dataset, FLAGS.data_dir, seed=FLAGS.seed or 0, feature_scaling=feature_scaling)
    latent_dim = FLAGS.latent_dim or DEFAULT_LATENT.get(dataset.name, 16)
    vae = build_vae(dataset, latent_dim)
    aggregation = FLAGS.aggregation
    config = DPConfig(aggregation=aggregation, l2_norm_clip=FLAGS.l2_norm_clip, batch_clip=FLAGS.batch_clip,
                      noise_multiplier=FLAGS.noise_multiplier, num_partitions=FLAGS.num_partitions,
                      max_batch_size=FLAGS.max_batch_size, clipping=FLAGS.clipping,
                      clipped_sum=FLAGS.clipped_sum, seed=FLAGS.seed)
    plan = plan_privacy(config, vae.term_spec(), len(dataset.x_train), FLAGS.batch_size, FLAGS.epochs,
                        FLAGS.sampling, FLAGS.delta, FLAGS.epsilon if aggregation != "none" else None,
                        FLAGS.max_epsilon, history=read_ledger(output_dir))
    optimizer = _optimizer(FLAGS.optimizer, FLAGS.learning_rate)
    os.makedirs(output_dir, exist_ok=True)
    start = time.time()
    fit = fit_private(vae, dataset.x_train, plan, optimizer, output_dir, seed=FLAGS.seed, verbose=FLAGS.verbose)
    train_seconds = time.time() - start
    labels = next(iter(dataset.labels_test.values())) if dataset.labels_test else None
    metrics = evaluate_vae(vae, dataset.x_test, labels, importance_samples=FLAGS.eval_importance_samples,
                           max_examples=FLAGS.eval_examples or None, seed=FLAGS.seed or 0)
    metrics["train_seconds"] = train_seconds
    if "loss" in fit["history"]:
        metrics["final_train_loss"] = fit["history"]["loss"][-1]
    vae.save_vae(os.path.join(output_dir, "vae"))
    _figures(vae, dataset, output_dir)
    summary = plan.summary()
    results = {
        "model": FLAGS.model, "dataset": dataset.name, "feature_scaling": feature_scaling, **summary,
        "epsilon": fit["epsilon"], "steps": fit["steps"], "epochs": fit["epochs_completed"],
        "planned_epochs": plan.epochs, "resumed": fit["resumed"], "budget_reached": fit["budget_reached"],
        "prior": FLAGS.prior, "regularizer": FLAGS.regularizer, "alpha": vae.alpha, "beta": vae.beta,
        "latent_dim": latent_dim, **_pinwheel_settings(dataset, vae), "num_samples_L": vae.num_samples, "optimizer": FLAGS.optimizer,
        "learning_rate": FLAGS.learning_rate, "seed": FLAGS.seed, "metrics": metrics,
        "history": fit["history"],
    }
    write_results(output_dir, results)
    return results


def _pinwheel_settings(dataset, vae: VAE) -> dict:
    if dataset.name != "pinwheel":
        return {}
    return {"pinwheel_scale": float(FLAGS.pinwheel_scale),
            "num_parameters": int(vae.encoder.count_params() + vae.decoder.count_params()),
            "pinwheel_hidden": list(parse_hidden(FLAGS.pinwheel_hidden))}


def _figures(vae: VAE, dataset, output_dir: str) -> None:
    if dataset.kind == "points":
        mean, _ = encode_all(vae, dataset.x_test)
        recon = vae.decode(tf.convert_to_tensor(mean)).numpy()
        means = vae.prior.means if isinstance(vae.prior, GaussianMixture) else None
        pinwheel_figure(dataset.x_test, recon, mean, os.path.join(output_dir, "pinwheel.png"),
                        title=f"{FLAGS.aggregation}, regularizer={FLAGS.regularizer}", prior_means=means)
    elif dataset.kind == "image":
        image_grid(vae.sample(64, seed=0).numpy(), os.path.join(output_dir, "samples.png"), title="samples")
        x = dataset.x_test[:32]
        recon = vae(tf.convert_to_tensor(x)).numpy()
        pairs = np.stack([x, recon], axis=1).reshape([-1, *x.shape[1:]])
        image_grid(pairs, os.path.join(output_dir, "reconstructions.png"), rows=8, title="data | reconstruction")


def sample(output_dir: str) -> dict:
    """`--mode=sample`: draws --num_samples from the VAE saved in `output_dir/vae`."""
    path = os.path.join(output_dir, "vae")
    if not os.path.isfile(os.path.join(path, "vae.json")):
        raise UsageError(f"--output_dir: {output_dir} holds no trained VAE (missing vae/vae.json)")
    if FLAGS.num_samples < 1:
        raise UsageError(f"--num_samples: must be >= 1, got {FLAGS.num_samples}")
    vae = load_vae(path)
    x = vae.sample(FLAGS.num_samples, seed=FLAGS.seed).numpy()
    np.savez_compressed(os.path.join(output_dir, "samples.npz"), x=x)
    out = {"samples": os.path.join(output_dir, "samples.npz"), "n": len(x)}
    if x.ndim == 4:
        out["grid"] = image_grid(x[:100], os.path.join(output_dir, "samples_grid.png"))
    return out
