"""`--model=dpwgan_gp|dpgan`: train a private GAN, score it, write results.json and sample grids.

GAN-only flags are defined here at import time. The common flags (--dataset, --data_dir,
--seed, --epochs, --batch_size, --learning_rate, --aggregation, --l2_norm_clip,
--noise_multiplier, --epsilon, --delta, --max_epsilon, --sampling) belong to train.py; a
common flag given on the command line (or in a flagfile) wins, otherwise the model's default
below applies (004's settings for DP-WGAN-GP, Xie et al.'s for DPGAN).

    run(output_dir, model_name) -> results dict      (train, evaluate, write)
    sample(output_dir) -> dict                       (--mode=sample: N samples from --generator_path)
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import numpy as np
from absl import flags, logging

from tfpriv.errors import UsageError

FLAGS = flags.FLAGS
MODELS = ("dpwgan_gp", "dpgan")
IMAGE_DATASETS = ("mnist", "fashion_mnist")


def _define(kind: str, name: str, default, help_text: str, **kwargs) -> None:
    if name not in FLAGS:
        getattr(flags, f"DEFINE_{kind}")(name, default, help_text, **kwargs)


_define("integer", "critic_steps", None, "Critic steps per generator step (default: 1 for dpwgan_gp as in 004, 5 for dpgan).")
_define("integer", "capacity", 32, "Critic/generator width: filters capacity x {1, 2, 4} (004: 16, 32, 96, 128).")
_define("float", "gp_weight", 10.0, "DP-WGAN-GP: gradient-penalty weight lambda.")
_define("float", "weight_clip", 0.01, "DPGAN: critic weights are clipped to [-c_p, c_p] after each update.")
_define("float", "generator_ema", 0.0, "Momentum of an EMA of the generator weights used for sampling (0: off). "
        "Post-processing: no privacy cost.")
_define("integer", "latent_size", 128, "Generator latent dimension.")
_define("boolean", "conditional", False, "Class-conditional GAN (labels are private: they enter the clipped critic).")
_define("integer", "num_samples", 10000, "Samples for the final scores (IS, FD) and for --mode=sample.")
_define("string", "generator_path", None, "--mode=sample: a GAN run directory or its generator.keras (default: --output_dir).")
_define("integer", "eval_every", 1, "Score the generator every N epochs for the IS-vs-epsilon curve (0: only at the end).")
_define("integer", "eval_every_steps", 0, "Score every N critic steps instead of every --eval_every epochs (0: off).")
_define("integer", "eval_samples", 2000, "Samples per intermediate score.")
_define("integer", "downstream_samples", 60000, "Conditional: synthetic examples the downstream CNN is trained on.")
_define("integer", "downstream_epochs", 3, "Conditional: epochs of the downstream CNN.")
_define("float", "max_minutes", 0.0, "Stop training after this much wall time (0: no limit); epsilon covers the steps taken.")
_define("integer", "max_steps", 0, "Stop after this many critic steps (0: no limit; reduced-settings runs).")
_define("string", "classifier_cache_dir", None, "Cache of the MNIST evaluation classifier (default ~/.cache/tfpriv).")

MODEL_DEFAULTS = {
    # 004's code: batch 128, Adam(0.5, 0.9) at batch * 3.125e-6, C = 1, sigma in {0.5..1}, 40 epochs.
    "dpwgan_gp": dict(critic_steps=1, batch_size=128, learning_rate=None, l2_norm_clip=1.0, noise_multiplier=0.5,
                      epochs=40, clipping="per_example"),
    # Xie et al.: n_critic 5, RMSProp 5e-5, c_p 0.01, batch 64.
    "dpgan": dict(critic_steps=5, batch_size=64, learning_rate=5e-5, l2_norm_clip=1.0, noise_multiplier=1.0,
                  epochs=20, clipping="fast"),
}
COMMON_DEFAULTS = dict(dataset="mnist", data_dir="../shared/data", aggregation="micro", sampling="poisson")


def _common(name: str, default):
    """A common flag set by the user (command line, flagfile or code), else `default`."""
    if name in FLAGS and not FLAGS[name].using_default_value and FLAGS[name].value is not None:
        return FLAGS[name].value
    return default


@dataclasses.dataclass(frozen=True)
class GanSettings:
    model: str
    dataset: str
    data_dir: str
    seed: int
    seed_from_os: bool
    epochs: int
    batch_size: int
    learning_rate: float
    aggregation: str
    l2_norm_clip: float
    noise_multiplier: float
    epsilon: float | None
    delta: float | None
    max_epsilon: float | None
    sampling: str
    critic_steps: int
    capacity: int
    gp_weight: float
    weight_clip: float
    generator_ema: float
    latent_size: int
    conditional: bool
    num_samples: int
    clipping: str
    eval_every: int
    eval_every_steps: int
    eval_samples: int
    downstream_samples: int
    downstream_epochs: int
    max_minutes: float
    max_steps: int
    classifier_cache_dir: str | None


def _need(flag: str, ok: bool, rule: str, value) -> None:
    if not ok:
        raise UsageError(f"--{flag}: must be {rule}, got {value}")


def validate_flags(model_name: str) -> GanSettings:
    """Every GAN flag checked (UsageError naming the flag) before anything is read or written."""
    if model_name not in MODELS:
        raise UsageError(f"--model: GAN models are {', '.join(MODELS)}, got {model_name!r}")
    if _common("feature_scaling", None) is not None:
        raise UsageError("--feature_scaling: applies to the UCI tabular datasets only; GAN models train on images")
    md = MODEL_DEFAULTS[model_name]
    batch_size = int(_common("batch_size", md["batch_size"]))
    from tfpriv.gan.wgan_gp import default_learning_rate
    from tfpriv.privacy.config import CLIPPING_METHODS
    lr_default = md["learning_rate"] if md["learning_rate"] is not None else default_learning_rate(batch_size)
    seed = _common("seed", None)
    s = GanSettings(
        model=model_name, dataset=_common("dataset", COMMON_DEFAULTS["dataset"]),
        data_dir=str(_common("data_dir", COMMON_DEFAULTS["data_dir"])),
        seed=int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**31),
        seed_from_os=seed is None,
        epochs=int(_common("epochs", md["epochs"])), batch_size=batch_size,
        learning_rate=float(_common("learning_rate", lr_default)),
        aggregation=_common("aggregation", COMMON_DEFAULTS["aggregation"]),
        l2_norm_clip=float(_common("l2_norm_clip", md["l2_norm_clip"])),
        noise_multiplier=float(_common("noise_multiplier", md["noise_multiplier"])),
        epsilon=_common("epsilon", None), delta=_common("delta", None),
        max_epsilon=_common("max_epsilon", None), sampling=_common("sampling", COMMON_DEFAULTS["sampling"]),
        critic_steps=FLAGS.critic_steps if FLAGS.critic_steps is not None else md["critic_steps"],
        capacity=FLAGS.capacity, gp_weight=FLAGS.gp_weight, weight_clip=FLAGS.weight_clip,
        generator_ema=FLAGS.generator_ema,
        latent_size=FLAGS.latent_size, conditional=FLAGS.conditional, num_samples=FLAGS.num_samples,
        clipping=_common("clipping", md["clipping"]),
        eval_every=FLAGS.eval_every, eval_every_steps=FLAGS.eval_every_steps, eval_samples=FLAGS.eval_samples,
        downstream_samples=FLAGS.downstream_samples, downstream_epochs=FLAGS.downstream_epochs,
        max_minutes=FLAGS.max_minutes, max_steps=FLAGS.max_steps, classifier_cache_dir=FLAGS.classifier_cache_dir)
    _need("dataset", s.dataset in IMAGE_DATASETS, f"one of {', '.join(IMAGE_DATASETS)} (28x28 images) for a GAN", repr(s.dataset))
    _need("capacity", s.capacity >= 1, ">= 1", s.capacity)
    _need("critic_steps", s.critic_steps >= 1, ">= 1", s.critic_steps)
    _need("latent_size", s.latent_size >= 1, ">= 1", s.latent_size)
    _need("generator_ema", 0 <= s.generator_ema < 1, "in [0, 1)", s.generator_ema)
    _need("gp_weight", math.isfinite(s.gp_weight) and s.gp_weight >= 0, "a finite number >= 0", s.gp_weight)
    _need("weight_clip", math.isfinite(s.weight_clip) and s.weight_clip > 0, "a positive finite number", s.weight_clip)
    _need("num_samples", s.num_samples >= 10, ">= 10", s.num_samples)
    _need("epochs", s.epochs >= 1, ">= 1", s.epochs)
    _need("batch_size", s.batch_size >= 1, ">= 1", s.batch_size)
    _need("learning_rate", math.isfinite(s.learning_rate) and s.learning_rate > 0, "a positive finite number", s.learning_rate)
    _need("aggregation", s.aggregation in ("micro", "none"),
          "micro (per-example clipping of the critic) or none (non-private baseline)", repr(s.aggregation))
    _need("clipping", s.clipping in CLIPPING_METHODS, f"one of {', '.join(CLIPPING_METHODS)}", repr(s.clipping))
    _need("eval_every", s.eval_every >= 0, ">= 0", s.eval_every)
    _need("eval_every_steps", s.eval_every_steps >= 0, ">= 0", s.eval_every_steps)
    _need("eval_samples", s.eval_samples >= 10, ">= 10", s.eval_samples)
    _need("downstream_samples", s.downstream_samples >= 10, ">= 10", s.downstream_samples)
    _need("downstream_epochs", s.downstream_epochs >= 1, ">= 1", s.downstream_epochs)
    _need("max_minutes", math.isfinite(s.max_minutes) and s.max_minutes >= 0, "a finite number >= 0", s.max_minutes)
    _need("max_steps", s.max_steps >= 0, ">= 0", s.max_steps)
    if s.model == "dpwgan_gp" and s.aggregation == "micro" and s.clipping == "fast" and s.gp_weight > 0:
        raise UsageError("--clipping: fast (ghost-norm) clipping is not exact for the gradient penalty; use per_example")
    if s.aggregation == "micro":
        _need("l2_norm_clip", math.isfinite(s.l2_norm_clip) and s.l2_norm_clip > 0, "a positive finite number", s.l2_norm_clip)
        _need("noise_multiplier", math.isfinite(s.noise_multiplier) and s.noise_multiplier >= 0, "a finite number >= 0",
              s.noise_multiplier)
    return s


def _build(s: GanSettings, num_classes: int | None):
    from tfpriv.gan import dpgan, wgan_gp
    gen_batch = s.batch_size
    if s.model == "dpwgan_gp":
        model = wgan_gp.make_dpwgan_gp(s.capacity, s.latent_size, num_classes, s.critic_steps, s.gp_weight,
                                       seed=s.seed, generator_batch_size=gen_batch)
        return model, wgan_gp.dp_adam(s.learning_rate), wgan_gp.dp_adam(s.learning_rate, s.generator_ema)
    model = dpgan.make_dpgan(s.capacity, s.latent_size, num_classes, s.critic_steps, s.weight_clip,
                             seed=s.seed, generator_batch_size=gen_batch)
    return model, dpgan.rmsprop(s.learning_rate), dpgan.rmsprop(s.learning_rate, s.generator_ema)


def run(output_dir: str, model_name: str) -> dict:
    """Trains `model_name` under the flags, scores it, writes results.json, grids and the generator."""
    s = validate_flags(model_name)
    import tensorflow as tf

    from tfpriv.data import load_dataset
    from tfpriv.gan import evaluation, training
    from tfpriv.gan.dpgan import privacy_comparison
    from tfpriv.privacy.config import DPConfig
    from tfpriv.training.results import write_results
    from tfpriv.training.runner import fit_private, plan_privacy, read_ledger

    data = load_dataset(s.dataset, s.data_dir)
    num_classes = int(data.num_classes.get("label", 10)) if s.conditional else None
    labels = data.labels_train["label"].astype(np.int32) if s.conditional else None
    tf.keras.utils.set_random_seed(s.seed)
    model, d_opt, g_opt = _build(s, num_classes)
    # Without --seed, the DP noise and the Poisson sampling draw from the OS (a release must not
    # record their seeds); the seed drawn above only fixes initialisation and latents.
    private_seed = None if s.seed_from_os else s.seed
    config = DPConfig(aggregation=s.aggregation, l2_norm_clip=s.l2_norm_clip, noise_multiplier=s.noise_multiplier,
                      expected_batch_size=float(s.batch_size), clipping=s.clipping, num_partitions=1,
                      seed=private_seed)
    plan = plan_privacy(config, model.spec, len(data.x_train), s.batch_size, s.epochs, s.sampling,
                        s.delta, s.epsilon, s.max_epsilon, history=read_ledger(output_dir))
    os.makedirs(output_dir, exist_ok=True)

    score_fn, classifier, ref_features = None, None, None
    if s.dataset == "mnist":
        from tfpriv.metrics.mnist_classifier import classifier_outputs, get_mnist_classifier
        classifier = get_mnist_classifier(s.data_dir, s.classifier_cache_dir)
        _, ref_features = classifier_outputs(classifier, data.x_test)

        def score_fn(m):
            raw = [v.numpy() for v in m.generator.trainable_variables]
            if s.generator_ema:  # score the averaged generator, then continue training the raw one
                g_opt.finalize_variable_values(m.generator.trainable_variables)
            images, lab = evaluation.generate_samples(m, s.eval_samples, seed=s.seed + 1)
            for v, w in zip(m.generator.trainable_variables, raw):
                v.assign(w)
            return evaluation.sample_scores(classifier, images, ref_features, lab)

    scoring = s.eval_every or s.eval_every_steps
    monitor = training.Monitor(plan.delta, s.eval_every, score_fn if scoring else None, plan.config.private,
                               os.path.join(output_dir, "progress.json"), every_steps=s.eval_every_steps)
    logging.info("GAN plan: %s", json.dumps(plan.summary(), default=str))
    limit = training.Limit(s.max_minutes or None, s.max_steps or None)
    arrays = data.x_train if labels is None else (data.x_train, labels)
    fit = fit_private(model, arrays, plan, (d_opt, g_opt), output_dir, seed=private_seed,
                      verbose=int(_common("verbose", 2)), extra_callbacks=[monitor, limit])
    fit.update(critic_steps=fit["train_steps"], generator_steps=int(g_opt.iterations.numpy()),
               limit_reached=limit.reached, scoring_seconds=monitor.seconds_scoring)
    if s.generator_ema:  # sample from the averaged generator (checkpoints keep the raw weights)
        g_opt.finalize_variable_values(model.generator.trainable_variables)
    gan_config = {"model": s.model, "capacity": s.capacity, "latent_size": s.latent_size, "num_classes": num_classes}
    training.save_generator(model, output_dir, gan_config)

    start = time.time()
    images, gen_labels = evaluation.generate_samples(model, s.num_samples, seed=s.seed + 2)
    metrics: dict = {}
    if classifier is not None:
        metrics.update(evaluation.sample_scores(classifier, images, ref_features, gen_labels))
        real_probs, _ = classifier_outputs(classifier, data.x_test)
        from tfpriv.metrics.generative import inception_score
        metrics["inception_score_real_test"] = inception_score(real_probs)[0]
    if s.conditional:
        synth, synth_labels = evaluation.generate_samples(model, s.downstream_samples, seed=s.seed + 3)
        metrics.update(evaluation.downstream_accuracy(synth, synth_labels, data.x_test, data.labels_test["label"],
                                                      epochs=s.downstream_epochs, seed=s.seed))
    eval_seconds = time.time() - start
    evaluation.save_grid(images, os.path.join(output_dir, "samples.png"), gen_labels,
                         title=f"{s.model} eps={fit['epsilon']:.3g}")

    summary = plan.summary()
    results = {
        "model": s.model, "dataset": s.dataset, "aggregation": plan.config.aggregation,
        "epsilon": fit["epsilon"], "delta": plan.delta,
        "noise_multiplier": summary["noise_multiplier"], "effective_noise_multiplier": summary["effective_noise_multiplier"],
        "sampling_rate": plan.sampling_rate, "steps": fit["steps"], "epochs": s.epochs, "metrics": metrics,
        "privacy": summary, "training": {k: v for k, v in fit.items() if k not in ("history", "plan")}, "history": fit["history"],
        "gan": {k: v for k, v in dataclasses.asdict(s).items() if k not in ("data_dir", "classifier_cache_dir")},
        # Includes tracing and data loading, not the intermediate scoring.
        "critic_steps_per_second": (fit["critic_steps"] / (fit["train_seconds"] - fit["scoring_seconds"])
                                    if fit["train_seconds"] > fit["scoring_seconds"] else None),
        "eval_seconds": eval_seconds, "accounting": "RDP, one Poisson-sampled Gaussian per critic step",
    }
    if s.model == "dpgan" and plan.config.private:
        results["dpgan_privacy_comparison"] = privacy_comparison(
            plan.config.noise_multiplier, plan.sampling_rate, s.critic_steps, plan.delta, s.batch_size, fit["steps"])
    write_results(output_dir, results)
    return results


def _resolve_generator(path: str | None) -> tuple[str, dict]:
    from tfpriv.gan.training import GAN_CONFIG_FILE, GENERATOR_FILE
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


def sample(output_dir: str) -> dict:
    """Writes output_dir/samples.npz (images [N, 28, 28, 1], labels when conditional) and sample_grid.png
    from the generator in --generator_path (default: the trained run in output_dir)."""
    file, config = _resolve_generator(FLAGS.generator_path or output_dir)
    n = FLAGS.num_samples
    _need("num_samples", n >= 1, ">= 1", n)
    import tensorflow as tf

    from tfpriv.gan import evaluation
    generator = tf.keras.models.load_model(file, compile=False)
    images, labels = evaluation.generate_samples(generator, n, num_classes=config.get("num_classes"),
                                                 seed=_common("seed", None))
    os.makedirs(output_dir, exist_ok=True)
    arrays = {"images": images} if labels is None else {"images": images, "labels": labels}
    npz = os.path.join(output_dir, "samples.npz")
    np.savez_compressed(npz, **arrays)
    png = evaluation.save_grid(images, os.path.join(output_dir, "sample_grid.png"), labels)
    return {"samples": npz, "grid": png, "num_samples": n, "conditional": labels is not None,
            "generator": file, "model": config.get("model")}
