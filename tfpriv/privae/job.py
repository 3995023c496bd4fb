"""`--model=privae` (= `vae`): train a (private) VAE, evaluate it, write results.json and figures."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.data import load_dataset
from tfpriv.data.pinwheel import SCALE as PINWHEEL_SCALE
from tfpriv.data.pinwheel import check_scale, load_pinwheel
from tfpriv.data.uci import resolve_feature_scaling
from tfpriv.errors import UsageError
from tfpriv.jobs import pipeline
from tfpriv.jobs import schema
from tfpriv.jobs.job import Family, Job, Synthesis, register
from tfpriv.jobs.pipeline import Built, progress
from tfpriv.jobs.schema import PrivateSettings, setting
from tfpriv.tuning.space import FamilyTuning, Objective
from tfpriv.privae import serving
from tfpriv.privae.architectures import (CONV_ENCODER_UNITS, PINWHEEL_ANCHORS, PINWHEEL_HIDDEN, build_architecture,
                                         parse_hidden)
from tfpriv.privae.divergences import make_divergence
from tfpriv.privae.evaluation import encode_all, evaluate_vae
from tfpriv.privae.priors import GaussianMixture, make_prior
from tfpriv.privae.vae import VAE, VAE_CONFIG, load_vae
from tfpriv.run_folder import VAE_DIR

DEFAULT_LATENT = {"digits": 8, "mnist": 50, "fashion_mnist": 50, "pinwheel": 2, "adult": 10, "abalone": 4}
OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PriVAESettings(PrivateSettings):
    feature_scaling: str = schema.feature_scaling()
    epochs: int = schema.epochs(20)
    batch_size: int = schema.batch_size(64)
    learning_rate: float = schema.learning_rate(1e-3)
    lr_schedule: str = schema.lr_schedule()
    batch_clip: float = schema.batch_clip()
    num_partitions: int = schema.num_partitions()
    max_batch_size: int | None = schema.max_batch_size()
    clipped_sum: str = schema.clipped_sum()
    latent_dim: int | None = schema.latent_dim()
    beta: float = schema.beta()
    num_samples: int = schema.num_samples(64)
    prior: str = setting("sparse", "Latent prior: normal, sparse (spike-and-slab), mixture (4 Gaussians at {0,1}^2).")
    regularizer: str = setting("mmd", "Batch-wise divergence: none, mmd (Cauchy-kernel MMD), kl_pq (KL(p||q)).")
    alpha: float = setting(10.0, "Weight of the batch-wise divergence.")
    prior_samples: int | None = setting(
        None, "Prior draws per partition in the batch-wise divergence (unset: as many as the partition has members). "
        "A constant, so it costs no privacy; more draws lower the variance of the divergence's estimate.")
    num_samples_L: int = setting(1, "L: reparameterised samples per example in the reconstruction term.", ge=1)
    architecture: str = setting("auto", "Encoder/decoder: auto, conv (28x28), mlp, pinwheel.")
    conv_encoder_units: int = setting(
        CONV_ENCODER_UNITS, "--architecture=conv: width of the encoder's hidden FC layer (most of its weights; the DP "
        "noise norm on the encoder grows with the square root of their number).", ge=1)
    pinwheel_hidden: str = setting(
        ",".join(map(str, PINWHEEL_HIDDEN)),
        "--architecture=pinwheel: hidden widths of the encoder (comma-separated; mirrored in the decoder).")
    pinwheel_anchor: str = setting(
        "none", "--architecture=pinwheel: none, decoder (the decoder reads z minus the prior's mean, a public "
        "constant, through hidden layers without biases) or both (the encoder too: no biases but the log-variance "
        "head's, its means offset by the prior's mean, so x = 0 is encoded there) or odd (as both, the means' offset "
        "a trainable bias started at the prior's mean).", choices=PINWHEEL_ANCHORS)
    pinwheel_posterior_std: float | None = setting(
        None, "--architecture=pinwheel: fix every posterior std at this value (the encoder outputs means only); "
        "unset = learned.", gt=0)
    pinwheel_scale: float = setting(
        PINWHEEL_SCALE, "--dataset=pinwheel: the generator's output scale (10 in Johnson et al.; 1 = arms of radius "
        "~1). A fixed constant of the generator, not computed from the data.", synthesizer=False)
    likelihood: str = setting("auto", "p(x|z): auto (the dataset's), bernoulli (data in [0,1]), gaussian (--obs_std) "
                              "or laplace (--obs_scale; Mathieu et al.'s Fashion-MNIST likelihood).")
    obs_std: float = setting(1.0, "Std of the Gaussian likelihood (--likelihood=gaussian).")
    obs_scale: float = setting(0.1, "Scale b of the Laplace likelihood (--likelihood=laplace; std = sqrt(2) b; 0.1 "
                               "in Mathieu et al.).")
    prior_sigma: float = setting(0.03, "Component std of the mixture prior.")
    prior_gamma: float = setting(0.8, "Spike weight gamma of the sparse prior.")
    prior_sigma0_sq: float = setting(0.05, "Spike VARIANCE sigma0^2 of the sparse prior (the term-wise paper's text: "
                                     "0.05). Give it or --prior_sigma0, not both.")
    prior_sigma0: float | None = setting(
        None, "Spike STANDARD DEVIATION sigma0 of the sparse prior, instead of --prior_sigma0_sq (Mathieu et al.'s "
        "code: 0.05, i.e. sigma0^2 = 0.0025).", gt=0)
    optimizer: str = setting("adam", "sgd or adam.", choices=OPTIMIZERS)
    eval_importance_samples: int = setting(100, "K: importance samples for the test log-likelihood.", ge=1,
                                           evaluation=True)
    eval_examples: int = setting(2000, "Held-out examples used for metrics (0 = all).", ge=0, evaluation=True)


class PriVAERun(pipeline.TrainingRun):
    def validate(self) -> None:
        """The cross-field rules (each setting's own bounds are checked when the settings are made)."""
        s = self.s
        parse_hidden(s.pinwheel_hidden)  # fail before loading data or planning privacy
        for flag, likelihood in (("obs_std", "gaussian"), ("obs_scale", "laplace")):
            if flag in s.given and s.likelihood != likelihood:
                raise UsageError(f"--{flag}: only applies to --likelihood={likelihood}, got --likelihood={s.likelihood}")
        if "prior_sigma0" in s.given and "prior_sigma0_sq" in s.given:
            raise UsageError("--prior_sigma0: give the spike's std or --prior_sigma0_sq (its variance), not both")
        if "prior_sigma0" in s.given and s.prior != "sparse":
            raise UsageError(f"--prior_sigma0: only applies to --prior=sparse, got --prior={s.prior}")
        if s.dataset != "pinwheel" and "pinwheel_scale" in s.given:
            raise UsageError(f"--pinwheel_scale: only applies to --dataset=pinwheel, got --dataset={s.dataset}")
        # adult/abalone: public constants when the VAE is trained privately (train statistics are refused then)
        self.feature_scaling = resolve_feature_scaling(s.feature_scaling, s.dataset, private=s.aggregation != "none")

    def load(self):
        s = self.s
        if s.seed is not None:
            keras.utils.set_random_seed(s.seed)
        if s.dataset == "pinwheel":
            return load_pinwheel(s.data_dir, seed=s.seed or 0, scale=check_scale(s.pinwheel_scale))
        return load_dataset(s.dataset, s.data_dir, seed=s.seed or 0, feature_scaling=self.feature_scaling)

    def build(self, data) -> Built:
        s = self.s
        self.latent_dim = s.latent_dim or DEFAULT_LATENT.get(data.name, 16)
        vae = build_vae(s, data, self.latent_dim)
        config = s.dp_config()
        optimizer = (keras.optimizers.SGD if s.optimizer == "sgd" else keras.optimizers.Adam)(
            pipeline.learning_rate(s, len(data.x_train)))
        return Built(vae, data.x_train, optimizer, config, s.batch_size, s.epochs, s.sampling)

    def evaluate(self) -> dict:
        s, data, vae = self.s, self.data, self.built.model
        labels = next(iter(data.labels_test.values())) if data.labels_test else None
        n = min(len(data.x_test), s.eval_examples or len(data.x_test))
        progress(s, f"evaluating the VAE on {n} test examples (log-likelihood with K={s.eval_importance_samples} "
                    "importance samples, sparsity, MMD) ...")
        metrics = evaluate_vae(vae, data.x_test, labels, importance_samples=s.eval_importance_samples,
                               max_examples=s.eval_examples or None, seed=s.seed or 0)
        metrics["train_seconds"] = self.fit["train_seconds"]
        if self.fit["history"].get("loss"):
            metrics["final_train_loss"] = self.fit["history"]["loss"][-1]
        self.save_model()
        _figures(s, vae, data, self.output_dir)
        return metrics

    def save_model(self) -> None:
        """Saves the trained VAE the run serves (`tfpriv.load`)."""
        self.built.model.save_vae(os.path.join(self.output_dir, VAE_DIR))

    def record(self) -> dict:
        s, vae = self.s, self.built.model
        out = {"feature_scaling": self.feature_scaling, "prior": s.prior, "regularizer": s.regularizer,
               "prior_samples": s.prior_samples, "alpha": vae.alpha, "beta": vae.beta, "latent_dim": self.latent_dim,
               "num_samples_L": vae.num_samples,
               "optimizer": s.optimizer, "learning_rate": s.learning_rate, "lr_schedule": s.lr_schedule,
               "prior_config": vae.prior.config(), "likelihood": vae.likelihood, "obs_std": vae.obs_std,
               "obs_scale": vae.obs_scale}
        if self.data.name == "pinwheel":
            out.update(pinwheel_scale=float(s.pinwheel_scale), pinwheel_hidden=list(parse_hidden(s.pinwheel_hidden)),
                       pinwheel_anchor=s.pinwheel_anchor, pinwheel_posterior_std=s.pinwheel_posterior_std,
                       num_parameters=int(vae.encoder.count_params() + vae.decoder.count_params()))
        if vae.encoder.name == "conv_encoder":
            out.update(conv_encoder_units=int(s.conv_encoder_units), encoder_parameters=int(vae.encoder.count_params()))
        return out


def build_vae(s: PriVAESettings, dataset, latent_dim: int) -> VAE:
    arch = s.architecture
    shape = dataset.x_train.shape[1:]
    if arch == "auto":
        arch = "conv" if tuple(shape[:2]) == (28, 28) else ("pinwheel" if dataset.kind == "points" else "mlp")
    for flag in ("pinwheel_hidden", "pinwheel_anchor", "pinwheel_posterior_std"):
        if arch != "pinwheel" and flag in s.given:
            raise UsageError(f"--{flag}: only applies to --architecture=pinwheel, got --architecture={arch}")
    if arch != "conv" and "conv_encoder_units" in s.given:
        raise UsageError(f"--conv_encoder_units: only applies to --architecture=conv, got --architecture={arch}")
    likelihood = dataset.likelihood if s.likelihood == "auto" else s.likelihood
    kwargs = {}
    if s.prior == "mixture":
        kwargs["sigma"] = s.prior_sigma
    elif s.prior == "sparse":
        sigma0_sq = s.prior_sigma0_sq if s.prior_sigma0 is None else s.prior_sigma0 ** 2
        kwargs.update(gamma=s.prior_gamma, sigma0_sq=sigma0_sq)
    prior = make_prior(s.prior, latent_dim, **kwargs)
    regularizer = make_divergence(s.regularizer, prior_samples=s.prior_samples)
    centre = None
    if s.pinwheel_anchor != "none":  # the prior's mean: a public constant of the model, not of the data
        centre = (prior.weights @ prior.means if isinstance(prior, GaussianMixture) else np.zeros(latent_dim)).tolist()
    encoder, decoder = build_architecture(arch, shape, latent_dim, pinwheel_hidden=s.pinwheel_hidden,
                                          pinwheel_anchor=s.pinwheel_anchor, pinwheel_centre=centre,
                                          pinwheel_posterior_std=s.pinwheel_posterior_std,
                                          conv_encoder_units=s.conv_encoder_units)
    alpha = s.alpha if regularizer is not None else 0.0
    return VAE(encoder, decoder, prior=prior, likelihood=likelihood, beta=s.beta, alpha=alpha,
               regularizer=regularizer, num_samples=s.num_samples_L, obs_std=s.obs_std, obs_scale=s.obs_scale)


def _figures(s, vae: VAE, dataset, output_dir: str) -> None:
    from tfpriv.privae import plots  # matplotlib: only when a run draws (0.5 s of every start otherwise)
    if dataset.kind == "points":
        mean, _ = encode_all(vae, dataset.x_test)
        recon = vae.decode(tf.convert_to_tensor(mean)).numpy()
        means = vae.prior.means if isinstance(vae.prior, GaussianMixture) else None
        plots.pinwheel_figure(dataset.x_test, recon, mean, os.path.join(output_dir, "pinwheel.png"),
                        title=f"{s.aggregation}, regularizer={s.regularizer}", prior_means=means)
    elif dataset.kind == "image":
        plots.image_grid(vae.sample(64, seed=0).numpy(), os.path.join(output_dir, "samples.png"), title="samples")
        x = dataset.x_test[:32]
        recon = vae(tf.convert_to_tensor(x)).numpy()
        pairs = np.stack([x, recon], axis=1).reshape([-1, *x.shape[1:]])
        plots.image_grid(pairs, os.path.join(output_dir, "reconstructions.png"), rows=8, title="data | reconstruction")


def run(settings: PriVAESettings, output_dir: str) -> dict:
    """Trains, evaluates and records a (Pri)VAE under `settings` in `output_dir` (resumes a run there)."""
    return PriVAERun(settings, output_dir).run()


def sample(settings: PriVAESettings, output_dir: str) -> dict:
    """`--mode=sample`: draws --num_samples from the VAE saved in `output_dir/vae`."""
    path = os.path.join(output_dir, VAE_DIR)
    if not os.path.isfile(os.path.join(path, VAE_CONFIG)):
        raise UsageError(f"--output_dir: {output_dir} holds no trained VAE (missing vae/vae.json)")
    from tfpriv.privae import plots
    x = load_vae(path).sample(settings.num_samples, seed=settings.seed).numpy()
    return pipeline.write_samples(output_dir, {"x": x}, x if x.ndim == 4 else None,
                                  grid=lambda images, png, _: plots.image_grid(images[:100], png))


# --tune: the default search space and the objectives (metrics of results.json, evaluated on held-out data).
TUNING = FamilyTuning(
    space={"learning_rate": {"type": "float", "min": 1e-4, "max": 1e-2, "log": True},
           "l2_norm_clip": {"type": "float", "min": 0.01, "max": 1.0, "log": True},
           "batch_size": {"type": "choice", "values": [32, 64]}},
    # Every metric is computed on the test split (evaluate_vae on x_test, the prior's own samples).
    objectives=tuple(Objective(name, direction, reads="test") for name, direction in (
        ("log_likelihood", "max"), ("reconstruction_error", "min"), ("mmd", "min"), ("hoyer_sparsity", "max"),
        ("cluster_purity", "max"))))

JOB = Job(
    names=("privae", "vae"), settings_type=PriVAESettings, run=run, sample=sample,
    training_run=PriVAERun, tuning=TUNING,
    # VAE(num_samples=...) is --num_samples_L; the priors' parameters are --prior_*; the pinwheel's scale.
    flag_names={"num_samples": "num_samples_L", "gamma": "prior_gamma", "sigma0_sq": "prior_sigma0_sq",
                "sigma": "prior_sigma", "scale": "pinwheel_scale"},
    summary="PriVAE / VAE with term-wise DP-SGD",
)

def _unit_interval(settings, kind: str) -> bool:
    """A synthesizer's x must lie in [0, 1] under the Bernoulli likelihood (the default for images)."""
    likelihood = settings.get("likelihood", "auto")
    return (("bernoulli" if kind == "image" else "gaussian") if likelihood == "auto" else likelihood) == "bernoulli"


FAMILY = register(Family(JOB, load=serving.load_run_vae, serving=serving.serving,
                         synthesis=Synthesis(ndims=(2, 4), unit_interval=_unit_interval)))
