"""Probe for the no-flag main job: one (private or non-private) MLP VAE on MNIST, timed.

Everything is the existing library: `load_dataset` (MNIST, checksums verified; the package's
bundled copy when --data_dir is unset or holds no mnist/), `build_architecture("mlp")`, `VAE`,
`DPConfig`, `plan_privacy` / `fit_private` (Poisson sampling, RDP accounting), `evaluate_vae`
and `image_grid`. Prints one JSON record (settings, epsilon, wall times, load averages, test
metrics, optional sample scores) and writes it with the figures to --output_dir:

    P=experiments/main_job/main_job_probe.py
    python $P --output_dir=/tmp/probe/private                     # the default: eps = 8
    python $P --output_dir=/tmp/probe/none --aggregation=none    # non-private reference
    python $P --output_dir=/tmp/probe/termwise --aggregation=termwise \
        --regularizer=mmd --batch_clip=0.02 --num_partitions=100 --latent_dim=16 --epochs=30

`--score_samples` also rates 10,000 decoded prior samples with the project's MNIST evaluation
CNN (`tfpriv.metrics.eval_classifier`, trained once and cached; --classifier_epochs): inception
score, mean top-class probability, share of samples with top-class probability >= 0.9, and the
class histogram. Real test images give the reference values.

Results and the chosen default: experiments/main_job/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfpriv.compat import keras  # noqa: E402
from tfpriv.data import load_dataset  # noqa: E402
from tfpriv.privae.architectures import build_architecture  # noqa: E402
from tfpriv.privae.divergences import make_divergence  # noqa: E402
from tfpriv.privae.evaluation import evaluate_vae  # noqa: E402
from tfpriv.privae.plots import image_grid  # noqa: E402
from tfpriv.privae.priors import make_prior  # noqa: E402
from tfpriv.privae.vae import VAE  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.training.runner import fit_private, plan_privacy  # noqa: E402

# The recommended no-flag default (experiments/main_job/README.md, run e6); every flag overrides one
# entry. With regularizer="none" the model has no batch-wise term, so batch_clip is not used
# (C2 = 0 is passed) and num_partitions does not enter the mechanism: DP-SGD on the VAE loss.
DEFAULTS = dict(
    dataset="mnist", architecture="mlp", latent_dim=8, prior="normal", regularizer="none", alpha=10.0,
    beta=1.0, aggregation="micro", l2_norm_clip=1.0, batch_clip=0.1, num_partitions=16,
    batch_size=2000, epochs=50, sampling="poisson", epsilon=8.0, delta=1e-5, optimizer="adam",
    learning_rate=2e-3, seed=0, eval_examples=2000, eval_importance_samples=100,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=None, help="folder with mnist/*.gz (default: the bundled copy)")
    p.add_argument("--output_dir", required=True)
    for key, value in DEFAULTS.items():
        kind = type(value)
        p.add_argument(f"--{key}", type=kind, default=value)
    p.add_argument("--score_samples", action="store_true", help="rate samples with the MNIST evaluation CNN")
    p.add_argument("--classifier_epochs", type=int, default=2, help="epochs of the cached evaluation CNN")
    return p.parse_args(argv)


def _optimizer(name: str, lr: float) -> keras.optimizers.Optimizer:
    return keras.optimizers.Adam(lr) if name == "adam" else keras.optimizers.SGD(lr)


def sample_scores(vae: VAE, real: np.ndarray, data_dir, epochs: int, n: int = 10000) -> dict:
    """Scores of n prior samples (and of n real test images) from the cached evaluation CNN."""
    from tfpriv.metrics.generative import frechet_distance, inception_score
    from tfpriv.metrics.eval_classifier import classifier_outputs, get_classifier, load_info

    start = time.time()
    clf = get_classifier("mnist", data_dir, epochs=epochs)
    info = load_info("mnist", epochs=epochs)
    samples = np.concatenate([vae.sample(1000, seed=10 + k).numpy() for k in range(n // 1000)])
    out = {"classifier_test_accuracy": info["test_accuracy"], "classifier_epochs": epochs, "n": n}
    feats = {}
    for name, images in (("samples", samples), ("real_test", real[:n])):
        probs, feats[name] = classifier_outputs(clf, images)
        top = probs.max(axis=1)
        out[name] = {
            "inception_score": inception_score(probs)[0],
            "mean_top_probability": float(top.mean()),
            "share_top_probability_ge_0.9": float(np.mean(top >= 0.9)),
            "class_histogram": np.bincount(probs.argmax(axis=1), minlength=10).tolist(),
        }
    out["frechet_distance_to_real_test"] = frechet_distance(feats["samples"], feats["real_test"])
    out["score_seconds"] = time.time() - start
    return out


def run(args: argparse.Namespace) -> dict:
    wall_start = time.time()
    load_before = os.getloadavg()
    keras.utils.set_random_seed(args.seed)
    os.makedirs(args.output_dir, exist_ok=True)

    t = time.time()
    data = load_dataset(args.dataset, args.data_dir)
    load_seconds = time.time() - t

    shape = data.x_train.shape[1:]
    encoder, decoder = build_architecture(args.architecture, shape, args.latent_dim)
    regularizer = make_divergence(args.regularizer)
    alpha = args.alpha if regularizer is not None else 0.0
    vae = VAE(encoder, decoder, prior=make_prior(args.prior, args.latent_dim), likelihood=data.likelihood,
              beta=args.beta, alpha=alpha, regularizer=regularizer)
    private = args.aggregation != "none"
    config = DPConfig(aggregation=args.aggregation, l2_norm_clip=args.l2_norm_clip,
                      batch_clip=args.batch_clip if regularizer is not None else 0.0,
                      num_partitions=args.num_partitions, seed=args.seed)
    plan = plan_privacy(config, vae.term_spec(), len(data.x_train), args.batch_size, args.epochs,
                        args.sampling, args.delta, args.epsilon if private else None)

    t = time.time()
    with contextlib.redirect_stdout(sys.stderr):  # Keras' per-epoch lines: stdout carries only the JSON
        fit = fit_private(vae, data.x_train, plan, _optimizer(args.optimizer, args.learning_rate),
                          args.output_dir, seed=args.seed, verbose=2)
    train_seconds = time.time() - t
    load_after_train = os.getloadavg()

    t = time.time()
    labels = data.labels_test.get("label")
    metrics = evaluate_vae(vae, data.x_test, labels, importance_samples=args.eval_importance_samples,
                           max_examples=args.eval_examples or None, seed=args.seed)
    eval_seconds = time.time() - t

    image_grid(vae.sample(64, seed=0).numpy(), os.path.join(args.output_dir, "samples.png"),
               title=f"{args.aggregation}: samples")
    x = data.x_test[:32]
    recon = vae(tf.convert_to_tensor(x)).numpy()
    pairs = np.stack([x, recon], axis=1).reshape([-1, *x.shape[1:]])
    image_grid(pairs, os.path.join(args.output_dir, "reconstructions.png"), rows=8,
               title=f"{args.aggregation}: data | reconstruction")
    main_job_seconds = time.time() - wall_start

    record = {
        "settings": {k: getattr(args, k) for k in DEFAULTS},
        "num_parameters": int(encoder.count_params() + decoder.count_params()),
        "num_examples": int(len(data.x_train)),
        "privacy": {**plan.summary(), "planned_steps": plan.planned_steps},
        "epsilon": fit["epsilon"] if math.isfinite(fit["epsilon"]) else None,
        "delta": plan.delta if private else None,
        "steps": fit["steps"],
        "seconds": {"load": load_seconds, "train": train_seconds, "evaluate": eval_seconds,
                    "main_job_total": main_job_seconds},
        "load_average": {"before": list(load_before), "after_train": list(load_after_train)},
        "metrics": metrics,
        "final_train_loss": fit["history"].get("loss", [None])[-1],
        "history": fit["history"],
    }
    if args.score_samples:
        record["sample_scores"] = sample_scores(vae, data.x_test, args.data_dir, args.classifier_epochs)
    record["seconds"]["total_with_scoring"] = time.time() - wall_start
    with open(os.path.join(args.output_dir, "probe.json"), "w") as f:
        json.dump(record, f, indent=2, default=str)
    return record


def main(argv=None) -> int:
    record = run(parse_args(argv))
    json.dump(record, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
