"""`--model=dpwgan_gp|dpgan`: train a private GAN, score it, write results.json and sample grids.

The GAN's settings are declared here (`GanSettings`; the shared ones in tfpriv/jobs/schema.py) with the
model's defaults (004's settings for DP-WGAN-GP, Xie et al.'s for DPGAN).

    JOB.run(settings, output_dir) -> results dict      (train, evaluate, write)
    JOB.sample(settings, output_dir) -> dict           (--mode=sample: N samples from --generator_path)
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import numpy as np
from absl import logging

from tfpriv.errors import UsageError
from tfpriv.gan import serving
from tfpriv.gan.dpgan import GAN_LOSSES
from tfpriv.jobs import pipeline, schema
from tfpriv.jobs.job import Family, Job, Synthesis, register
from tfpriv.jobs.pipeline import Built, progress
from tfpriv.jobs.schema import Derived, PrivateSettings, need, setting
from tfpriv.tuning.space import FamilyTuning, Objective
from tfpriv.run_folder import GAN_CONFIG_FILE, GENERATOR_FILE, PROGRESS_FILE

MODELS = ("dpwgan_gp", "dpgan")
IMAGE_DATASETS = ("mnist", "fashion_mnist")
GAN_OPTIMIZERS = ("rmsprop", "adam")
EVAL_PROTOCOLS = ("tfpriv", "dpimagebench")



def _default_learning_rate(values: dict) -> float:
    from tfpriv.gan.wgan_gp import default_learning_rate
    return default_learning_rate(values["batch_size"])


def _default_downstream_epochs(values: dict) -> int:
    from tfpriv.metrics import dpimagebench
    return dpimagebench.EPOCHS if values["eval_protocol"] == "dpimagebench" else 3


# 004's code: batch 128, Adam(0.5, 0.9) at batch * 3.125e-6, C = 1, sigma in {0.5..1}, 40 epochs.
# Xie et al. (dpgan): n_critic 5, RMSProp 5e-5, c_p 0.01, batch 64.
@dataclasses.dataclass(frozen=True, kw_only=True)
class GanSettings(PrivateSettings):
    dataset: str = schema.dataset("mnist")
    aggregation: str = schema.aggregation("micro")
    noise_multiplier: float = schema.noise_multiplier(per_model={"dpwgan_gp": 0.5, "dpgan": 1.0})
    clipping: str = schema.clipping(per_model={"dpwgan_gp": "per_example", "dpgan": "fast"})
    epochs: int = schema.epochs(per_model={"dpwgan_gp": 40, "dpgan": 20})
    batch_size: int = schema.batch_size(per_model={"dpwgan_gp": 128, "dpgan": 64})
    learning_rate: float = schema.learning_rate(per_model={
        "dpwgan_gp": Derived(_default_learning_rate, "batch_size x 3.125e-6"), "dpgan": 5e-5})
    lr_schedule: str = schema.lr_schedule()
    num_samples: int = schema.num_samples(10000)
    critic_steps: int = setting(None, "Critic steps per generator step.", per_model={"dpwgan_gp": 1, "dpgan": 5}, ge=1)
    capacity: int = setting(32, "Critic/generator width: filters capacity x {1, 2, 4} (004: 16, 32, 96, 128).", ge=1)
    generator_capacity: int | None = setting(
        None, "Generator width, if it should differ from --capacity. The generator is post-processing: its size adds "
        "no noise (the critic's does, with the square root of its weights).", ge=1)
    diversity_weight: float = setting(
        0.0, "Weight of the generator's mode-seeking term (Mao et al. 2019): pairs of fakes with one label and "
        "different latents are pushed apart (0: off). Post-processing: no privacy cost.", ge=0, note="0: off")
    saturation_bound: float = setting(
        0.0, "Penalise the generator's pre-sigmoid values beyond +-bound (mean of (|x| - bound)^2 over pixels; 0: "
        "off), against the start-up collapse in which they sink so far below 0 that every image is blank and the "
        "generator stops learning. Post-processing: no privacy cost.", ge=0, note="0: off")
    noise_multiplicity: int = setting(
        1, "Fakes and interpolation weights per real example in the critic's loss, averaged within the example "
        "before clipping (DPDM's noise multiplicity): the same clip and epsilon, about K times the critic's compute. "
        "Needs per-example clipping (not --clipping=fast).", ge=1, note="1: one fake per example")
    warm_start_epsilon: float = setting(
        0.0, "Spend this epsilon (at --delta; part of --epsilon, which then calibrates the critic's noise for the "
        "rest) on DP class means of the training images before the first critic step, and pretrain the generator "
        "to draw them (docs/privacy.md, \"Releases\"; 0: off).", ge=0, note="0: off")
    warm_start_steps: int = setting(300, "Adam steps of the generator's pretraining on the noisy class means "
                                    "(--warm_start_epsilon; post-processing: no privacy cost).", ge=1)
    gp_weight: float = setting(10.0, "DP-WGAN-GP: gradient-penalty weight lambda.", ge=0)
    weight_clip: float = setting(0.01, "DPGAN: critic weights are clipped to [-c_p, c_p] after each update (0: off, "
                                 "only with --gan_loss=logistic).", ge=0, note="0: off")
    gan_loss: str = setting("wasserstein", "DPGAN: wasserstein (Xie et al.) or logistic (the standard GAN loss with a "
                            "non-saturating generator, as in Bie et al. 2023).", choices=GAN_LOSSES)
    gan_optimizer: str = setting(None, "rmsprop or adam (Adam with betas 0.5, 0.9) for critic and generator.",
                                 per_model={"dpwgan_gp": "adam", "dpgan": "rmsprop"}, choices=GAN_OPTIMIZERS)
    generator_ema: float = setting(0.0, "Momentum of an EMA of the generator weights used for sampling (0: off). "
                                   "Post-processing: no privacy cost.", ge=0, lt=1)
    latent_size: int = setting(128, "Generator latent dimension.", ge=1)
    conditional: bool = setting(False, "Class-conditional GAN (labels are private: they enter the clipped critic).",
                                synthesizer=False)  # a synthesizer's: whether fit was given labels
    generator_path: str | None = setting(None, "--mode=sample: a GAN run directory or its generator.keras (default: "
                                         "--output_dir).", synthesizer=False)
    eval_every: int = setting(1, "Score the generator every N epochs for the IS-vs-epsilon curve (0: only at the "
                              "end).", ge=0, evaluation=True)
    eval_every_steps: int = setting(0, "Score every N critic steps instead of every --eval_every epochs (0: off).",
                                    ge=0, evaluation=True)
    eval_samples: int = setting(2000, "Samples per intermediate score.", ge=10, evaluation=True)
    downstream_samples: int = setting(
        60000, "Conditional: synthetic examples the downstream classifier(s) are trained on "
        "(--eval_protocol=dpimagebench: the first n - n // 12 of them).", ge=10, evaluation=True)
    downstream_epochs: int = setting(
        Derived(_default_downstream_epochs, "3 for --eval_protocol=tfpriv, 50 for dpimagebench as in DPImageBench"),
        "Conditional: epochs of the downstream classifier(s).", ge=1, evaluation=True)
    eval_protocol: str = setting(
        "tfpriv", "Conditional: tfpriv (a small CNN trained on the samples, its last epoch scored on the test split) "
        "or dpimagebench (DPImageBench's: 5,000 training examples held out of the GAN's training as a private "
        "validation split, its ResNet trained on the samples, the epoch chosen on that split with a noisy count, the "
        "test split scored once; docs/dpimagebench.md).", choices=EVAL_PROTOCOLS, evaluation=True)
    selection_epsilon: float | None = setting(
        None, "--eval_protocol=dpimagebench: epsilon of each classifier's noisy epoch selection (Laplace noise of "
        "scale 1/epsilon on the count of correct validation predictions), added to the run's epsilon (default: the "
        "run's epsilon, DPImageBench's rule).", gt=0, evaluation=True)
    classifier_depth: int = setting(110, "--eval_protocol=dpimagebench: depth of DPImageBench's ResNet (6n + 2; 110 "
                                    "is DPImageBench's).", evaluation=True)
    max_minutes: float = setting(0.0, "Stop training after this much wall time (0: no limit); epsilon covers the steps "
                                 "taken.", ge=0)
    max_steps: int = setting(0, "Stop after this many critic steps (0: no limit; reduced-settings runs).", ge=0)
    classifier_cache_dir: str | None = setting(
        None, "Cache of the evaluation classifiers, used only where tfpriv's shipped copies are missing (default "
        "~/.cache/tfpriv).", evaluation=True)
    public_scores: bool = setting(
        False, "Also score the samples with an evaluation classifier trained on the test split only (metrics "
        "*_public: inception score, Frechet distance to the test set, label agreement); --tune chooses by these, "
        "since the default classifier is trained on the training split, the GAN's private data.", evaluation=True)


def validate(s: GanSettings) -> None:
    """Every GAN setting checked (UsageError naming the flag) before anything is read or written."""
    need("batch_size", s.diversity_weight == 0 or s.batch_size >= 2,
         ">= 2 with --diversity_weight (the generator pairs its fakes)", s.batch_size)
    if s.model == "dpwgan_gp" and s.gan_loss != "wasserstein":
        raise UsageError(f"--gan_loss: {s.gan_loss!r} applies to --model=dpgan only; DP-WGAN-GP is a Wasserstein GAN")
    if s.model == "dpgan" and s.gan_loss == "wasserstein" and s.weight_clip == 0:
        raise UsageError("--weight_clip: the Wasserstein critic needs weight clipping (> 0); 0 (off) only with "
                         "--gan_loss=logistic")
    need("num_samples", s.num_samples >= 10, ">= 10 (the final scores)", s.num_samples)
    if s.warm_start_epsilon:
        need("warm_start_epsilon", s.aggregation == "micro", "0 without privacy (--aggregation=none)",
             s.warm_start_epsilon)
        need("warm_start_epsilon", s.epsilon is None or s.warm_start_epsilon < s.epsilon,
             f"below --epsilon={s.epsilon:g} (it is part of it)" if s.epsilon else "", s.warm_start_epsilon)
    need("aggregation", s.aggregation in ("micro", "none"),
         "micro (per-example clipping of the critic) or none (non-private baseline)", repr(s.aggregation))
    validate_protocol(s)
    if s.model == "dpwgan_gp" and s.aggregation == "micro" and s.clipping == "fast" and s.gp_weight > 0:
        raise UsageError("--clipping: fast (ghost-norm) clipping is not exact for the gradient penalty; use per_example")
    if s.aggregation == "micro" and s.clipping == "fast" and s.noise_multiplicity > 1:
        raise UsageError("--noise_multiplicity: an example's loss spans its K fakes, which fast (ghost-norm) clipping "
                         "would clip as K examples; use --clipping=per_example")
    if s.aggregation == "micro":
        need("l2_norm_clip", math.isfinite(s.l2_norm_clip) and s.l2_norm_clip > 0, "a positive finite number", s.l2_norm_clip)
        need("noise_multiplier", math.isfinite(s.noise_multiplier) and s.noise_multiplier >= 0, "a finite number >= 0",
             s.noise_multiplier)


def validate_protocol(s: GanSettings) -> None:
    """--eval_protocol and the flags only it reads."""
    from tfpriv.metrics import dpimagebench, resnet
    if s.eval_protocol != "dpimagebench":
        for name in ("selection_epsilon", "classifier_depth"):
            if name in s.given:
                raise UsageError(f"--{name}: only applies to --eval_protocol=dpimagebench")
        return
    if not s.conditional:
        raise UsageError("--eval_protocol: dpimagebench trains classifiers on labelled samples and needs --conditional "
                         "(every generator DPImageBench benchmarks is class-conditional)")
    resnet.check_depth(s.classifier_depth)  # its `depth` is --classifier_depth (JOB.flag_names)
    need("downstream_samples", s.downstream_samples >= dpimagebench.SYNTHETIC_VALIDATION_FRACTION,
         f">= {dpimagebench.SYNTHETIC_VALIDATION_FRACTION} with --eval_protocol=dpimagebench", s.downstream_samples)


class GanRun(pipeline.TrainingRun):
    def validate(self) -> None:
        self.check_data_source()
        validate(self.s)
        # Without --seed, the DP noise and the Poisson sampling draw from the OS (a release must not
        # record their seeds); this seed only fixes initialisation and latents.
        self.seed_from_os = self.s.seed is None
        self.seed = int(self.s.seed) if self.s.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        self.protocol_record = None  # results.json's `evaluation`, once `evaluate` has scored the generator
        self.validation = None  # dpimagebench: the private validation split (images, labels), set by `load`

    def check_data_source(self) -> None:
        """The dataset is one the GAN's 28x28 architecture and its evaluation classifier are for."""
        s = self.s
        need("dataset", s.dataset in IMAGE_DATASETS, f"one of {', '.join(IMAGE_DATASETS)} (28x28 images) for a GAN",
             repr(s.dataset))

    def sampling_seed(self) -> int | None:
        return None if self.seed_from_os else self.seed

    def load(self):
        """The dataset; under --eval_protocol=dpimagebench its training split without the private
        validation split (`self.validation`), so the GAN and its accountant see N - 5,000 examples."""
        from tfpriv.data import load_dataset
        data = load_dataset(self.s.dataset, self.s.data_dir)
        if self.s.eval_protocol != "dpimagebench":
            return data
        from tfpriv.metrics import dpimagebench
        train, val = dpimagebench.validation_split(len(data.x_train))
        labels = data.labels_train["label"]
        self.validation = (data.x_train[val], labels[val])
        return dataclasses.replace(data, x_train=data.x_train[train],
                                   labels_train={k: v[train] for k, v in data.labels_train.items()})

    def planned(self, plan) -> None:
        """A resumed run keeps the training set it started with (a protocol change would move the
        validation split in or out of the GAN's data)."""
        path = os.path.join(self.train_dir, "privacy_plan.json")
        if pipeline.checkpoint_position(self.train_dir)[0] and os.path.isfile(path):
            with open(path) as f:
                before = json.load(f).get("num_examples")
            if before is not None and before != plan.num_examples:
                raise UsageError(f"--eval_protocol: the run in --output_dir trained on {before} examples, this one would "
                                 f"train on {plan.num_examples}; resume it with the --eval_protocol it started with")

    def build(self, data) -> Built:
        from tfpriv.compat import keras

        from tfpriv.gan import dpgan, wgan_gp
        s = self.s
        self.num_classes = int(data.num_classes.get("label", 10)) if s.conditional else None
        labels = data.labels_train["label"].astype(np.int32) if s.conditional else None
        image_shape = tuple(int(d) for d in data.x_train.shape[1:])  # 28x28x1 but for a synthesizer's arrays
        keras.utils.set_random_seed(self.seed)
        if s.model == "dpwgan_gp":
            model = wgan_gp.make_dpwgan_gp(s.capacity, s.latent_size, self.num_classes, s.critic_steps, s.gp_weight,
                                           seed=self.seed, generator_batch_size=s.batch_size,
                                           generator_capacity=s.generator_capacity, diversity_weight=s.diversity_weight,
                                           saturation_bound=s.saturation_bound, noise_multiplicity=s.noise_multiplicity,
                                           image_shape=image_shape)
        else:
            model = dpgan.make_dpgan(s.capacity, s.latent_size, self.num_classes, s.critic_steps, s.weight_clip,
                                     seed=self.seed, generator_batch_size=s.batch_size, gan_loss=s.gan_loss,
                                     generator_capacity=s.generator_capacity, diversity_weight=s.diversity_weight,
                                     saturation_bound=s.saturation_bound, noise_multiplicity=s.noise_multiplicity,
                                     image_shape=image_shape)
        optimizer = wgan_gp.dp_adam if s.gan_optimizer == "adam" else dpgan.rmsprop
        # The critic updates every step, the generator every critic_steps-th: each decays over its own updates.
        d_opt = optimizer(pipeline.learning_rate(s, len(data.x_train)))
        g_opt = optimizer(pipeline.learning_rate(s, len(data.x_train), s.critic_steps), s.generator_ema)
        self.g_opt = g_opt
        config = s.dp_config(expected_batch_size=float(s.batch_size), num_partitions=1, seed=self.sampling_seed())
        arrays = data.x_train if labels is None else (data.x_train, labels)
        built = Built(model, arrays, (d_opt, g_opt), config, s.batch_size, s.epochs, s.sampling)
        if s.warm_start_epsilon and config.private:
            from tfpriv.gan import warm_start
            built.releases = {warm_start.RELEASE: s.warm_start_epsilon}
            built.make_releases = warm_start.class_means_warm_start(
                data.x_train, labels, self.num_classes, model.generator, s.warm_start_steps, self.sampling_seed(),
                pretraining_seed=self.seed)
        return built

    def scorer(self):
        """The generator's scores during training (None: only epsilon and the losses are recorded);
        loads the evaluation classifier, which `evaluate` also uses."""
        from tfpriv.gan import evaluation
        s = self.s
        from tfpriv.metrics.eval_classifier import classifier_outputs
        self.classifier = _classifier(s)
        _, self.ref_features = classifier_outputs(self.classifier, self.data.x_test)

        def score_fn(m):
            raw = [v.numpy() for v in m.generator.trainable_variables]
            if s.generator_ema:  # score the averaged generator, then continue training the raw one
                self.g_opt.finalize_variable_values(m.generator.trainable_variables)
            images, lab = evaluation.generate_samples(m, s.eval_samples, seed=self.seed + 1)
            for v, w in zip(m.generator.trainable_variables, raw):
                v.assign(w)
            return evaluation.sample_scores(self.classifier, images, self.ref_features, lab)

        return score_fn if s.eval_every or s.eval_every_steps else None

    def callbacks(self, plan) -> list:
        from tfpriv.gan import training
        s = self.s
        self.monitor = training.Monitor(plan.delta, s.eval_every, self.scorer(), plan.config.private,
                                        os.path.join(self.output_dir, PROGRESS_FILE), every_steps=s.eval_every_steps)
        self.limit = training.Limit(s.max_minutes or None, s.max_steps or None)
        logging.info("GAN plan: %s", json.dumps(plan.summary(), default=str))
        return [self.monitor, self.limit]

    def save_model(self) -> None:
        """Counts the generator's steps into the fit record and saves the generator the run serves."""
        from tfpriv.gan import training
        from tfpriv.gan.architectures import generator_width
        s, model, fit = self.s, self.built.model, self.fit
        fit.update(critic_steps=fit["train_steps"], generator_steps=int(self.g_opt.iterations.numpy()),
                   limit_reached=self.limit.reached, scoring_seconds=self.monitor.seconds_scoring)
        if s.generator_ema:  # sample from the averaged generator (checkpoints keep the raw weights)
            self.g_opt.finalize_variable_values(model.generator.trainable_variables)
        training.save_generator(model, self.output_dir, {
            "model": s.model, "capacity": s.capacity, "generator_capacity": generator_width(s.capacity, s.generator_capacity),
            "latent_size": s.latent_size, "num_classes": self.num_classes})

    def limit_line(self) -> str | None:
        """The line announcing a --max_steps or --max_minutes stop (None if training was not stopped)."""
        if not self.limit.reached:
            return None
        flag = f"--max_steps={self.s.max_steps}" if self.limit.reason == "max_steps" else \
            f"--max_minutes={self.s.max_minutes:g}"
        return (f"stopped at {flag}: {self.fit['train_steps']} of {self.plan.planned_steps} planned critic steps; "
                "epsilon covers the steps taken")

    def evaluate(self) -> dict:
        from tfpriv.gan import evaluation
        s, model, fit = self.s, self.built.model, self.fit
        if self.limit_line():
            print(self.limit_line(), flush=True)
        self.save_model()
        start = time.time()
        progress(s, f"generating {s.num_samples} samples ...")
        images, gen_labels = evaluation.generate_samples(model, s.num_samples, seed=self.seed + 2)
        metrics: dict = {}
        from tfpriv.metrics.eval_classifier import classifier_outputs
        from tfpriv.metrics.generative import inception_score
        progress(s, f"scoring {s.num_samples} samples with the {s.dataset} evaluation classifier "
                    "(inception score, Frechet distance) ...")
        metrics.update(evaluation.sample_scores(self.classifier, images, self.ref_features, gen_labels))
        progress(s, f"inception score {metrics['inception_score']:.3f}; scoring the real test set ...")
        real_probs, _ = classifier_outputs(self.classifier, self.data.x_test)
        metrics["inception_score_real_test"] = inception_score(real_probs)[0]
        if s.public_scores:
            progress(s, f"scoring the samples with the {s.dataset} evaluation classifier trained on the test split ...")
            public = _classifier(s, split="test")
            _, public_features = classifier_outputs(public, self.data.x_test)
            scores = evaluation.sample_scores(public, images, public_features, gen_labels)
            metrics.update({f"{name}_public": value for name, value in scores.items()})
        self.protocol_record = {"protocol": s.eval_protocol}
        if s.conditional and s.eval_protocol == "dpimagebench":
            synth, synth_labels = evaluation.generate_samples(model, s.downstream_samples, seed=self.seed + 3)
            self.protocol_record = evaluation.dpimagebench_record(
                synth, synth_labels, self.data, validation=self.validation, held_out=True,
                training_epsilon=fit["epsilon"], delta=self.plan.delta, run_dir=self.train_dir,
                selection_epsilon=s.selection_epsilon, depth=s.classifier_depth, epochs=s.downstream_epochs,
                seed=self.seed, verbose=s.verbose, progress=lambda m: progress(s, m))
            metrics["dpimagebench_accuracy"] = self.protocol_record["accuracy"]
            print(evaluation.protocol_line(self.protocol_record), flush=True)
        elif s.conditional:
            progress(s, f"training the downstream CNN on {s.downstream_samples} synthetic examples "
                        f"({s.downstream_epochs} epochs) ...")
            synth, synth_labels = evaluation.generate_samples(model, s.downstream_samples, seed=self.seed + 3)
            metrics.update(evaluation.downstream_accuracy(synth, synth_labels, self.data.x_test,
                                                          self.data.labels_test["label"], epochs=s.downstream_epochs,
                                                          seed=self.seed, verbose=s.verbose))
        self.eval_seconds = time.time() - start
        evaluation.save_grid(images, os.path.join(self.output_dir, "samples.png"), gen_labels,
                             title=f"{s.model} eps={fit['epsilon']:.3g}")
        return metrics

    def record(self) -> dict:
        from tfpriv.gan.architectures import generator_width
        from tfpriv.gan.dpgan import privacy_comparison
        s, plan, fit = self.s, self.plan, self.fit
        out = {
            "privacy": plan.summary(),
            "training": {k: v for k, v in fit.items() if k not in ("history", "plan", "segment")},
            "gan": {**s.record(exclude=("data_dir", "classifier_cache_dir", "generator_path")),
                    "generator_capacity": generator_width(s.capacity, s.generator_capacity),
                    "seed": self.s.seed, "seed_from_os": self.seed_from_os},  # the loss stream's seed only if given
            # Includes tracing and data loading, not the intermediate scoring.
            "critic_steps_per_second": (fit["critic_steps"] / (fit["train_seconds"] - fit["scoring_seconds"])
                                        if fit["train_seconds"] > fit["scoring_seconds"] else None),
            "limit_reached": fit["limit_reached"],
            "eval_seconds": self.eval_seconds,
            "accounting": f"{plan.accountant.name.upper()}, " + (
                "one Poisson-sampled Gaussian per critic step" if plan.sampling == "poisson" else
                "one Gaussian at half the noise multiplier per epoch of shuffled critic batches"),
            "evaluation": self.protocol_record,
        }
        if s.model == "dpgan" and plan.config.private and plan.sampling == "poisson":  # Xie et al. subsample too
            out["dpgan_privacy_comparison"] = privacy_comparison(
                plan.config.noise_multiplier, plan.sampling_rate, s.critic_steps, plan.delta, s.batch_size, fit["steps"])
        return out


def _classifier(s: GanSettings, split: str = "train"):
    """The dataset's evaluation classifier fitted on `split`: shipped with tfpriv (the training
    split's); if missing, trained once (progress shown when --verbose), then cached."""
    from tfpriv.metrics import eval_classifier
    if not eval_classifier.is_available(s.dataset, s.classifier_cache_dir, split=split):
        path = eval_classifier.cached_model_path(s.dataset, s.classifier_cache_dir, split=split)
        on = "" if split == "train" else f" on the {split} split"
        progress(s, f"training the {s.dataset} evaluation classifier{on} ({eval_classifier.DEFAULT_EPOCHS} epochs; "
                    f"once, then cached in {path.parent}) ...")
    return eval_classifier.get_classifier(s.dataset, s.data_dir, s.classifier_cache_dir, verbose=s.verbose,
                                          split=split)


def run(settings: GanSettings, output_dir: str) -> dict:
    """Trains settings.model, scores it, writes results.json, grids and the generator (resumes a run there)."""
    return GanRun(settings, output_dir).run()


def _resolve_generator(path: str | None) -> tuple[str, dict]:
    if not path:
        raise UsageError("--output_dir: --mode=sample needs a GAN run folder (or pass --generator_path)")
    directory, file = (path, os.path.join(path, GENERATOR_FILE)) if os.path.isdir(path) else (os.path.dirname(path), path)
    if not os.path.isfile(file):
        raise UsageError(f"--generator_path: no generator at {file}")
    config_path = os.path.join(directory, GAN_CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise UsageError(f"--generator_path: {config_path} (the generator's settings) is missing")
    with open(config_path) as f:
        return file, json.load(f)


def sample(settings: GanSettings, output_dir: str) -> dict:
    """Writes output_dir/samples.npz (images [N, 28, 28, 1], labels when conditional) and samples_grid.png
    from the generator in --generator_path (default: the trained run in output_dir)."""
    file, config = _resolve_generator(settings.generator_path or output_dir)
    n = settings.num_samples
    from tfpriv.compat import keras

    from tfpriv.gan import evaluation
    generator = keras.models.load_model(file, compile=False)
    images, labels = evaluation.generate_samples(generator, n, num_classes=config.get("num_classes"),
                                                 seed=settings.seed)
    arrays = {"images": images} if labels is None else {"images": images, "labels": labels}
    out = pipeline.write_samples(output_dir, arrays, images, labels, grid=evaluation.save_grid)
    return {**out, "conditional": labels is not None, "generator": file, "model": config.get("model")}


# --tune: the default search space and the objectives (metrics of results.json). Trials choose by
# scores that read only the test split: IS, FD (to the test set) and label agreement from the
# evaluation classifier trained on the test split (`--public_scores`; the default classifier is
# trained on the training split, the GAN's private data), downstream accuracy of a CNN trained on
# samples and tested on the test split.
TUNING = FamilyTuning(
    space={"learning_rate": {"type": "float", "min": 1e-5, "max": 1e-3, "log": True},
           "l2_norm_clip": {"type": "float", "min": 0.1, "max": 10.0, "log": True},
           "batch_size": {"type": "choice", "values": [64, 128]}},
    objectives=(Objective("inception_score", "max", {"inception_score_public": 1.0}, reads="test"),
                Objective("frechet_distance", "min", {"frechet_distance_public": 1.0}, reads="test"),
                Objective("downstream_accuracy", "max", reads="test"),
                Objective("label_agreement", "max", {"label_agreement_public": 1.0}, reads="test")),
    # Trials run the tfpriv protocol: dpimagebench's noisy selection reads the private validation
    # split, which the tuning job's accounting (training events only) does not cover.
    trial_settings={"public_scores": True, "eval_protocol": "tfpriv"})

JOB = Job(
    names=MODELS, settings_type=GanSettings, run=run, sample=sample,
    training_run=GanRun, tuning=TUNING, flag_names={"depth": "classifier_depth", "releases": "warm_start_epsilon"},
    summary="DP-WGAN-GP and DPGAN on 28x28 images",
)

def _images(settings, kind: str) -> bool:
    """A GAN's images lie in [0, 1] (its generator's sigmoid)."""
    return True


FAMILY = register(Family(JOB, load=serving.load, serving=serving.serving,
                         synthesis=Synthesis(ndims=(4,), labels="conditional", unit_interval=_images)))
