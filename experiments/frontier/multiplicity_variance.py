"""Issue #36, noise multiplicity: how much of the critic's gradient noise do the fake draws make?

    python experiments/frontier/multiplicity_variance.py RUN_DIR/checkpoints/ckpt-34 --data_dir=../shared/data \
        [--capacity=16] [--noise_multiplier=3.215] [--batch_size=1024] [--examples=256] [--draws=6] [--ks=1,2,4,8]

Restores a conditional DP-WGAN-GP checkpoint's generator and critic, takes `examples` real training
examples and, for each K in `ks`, computes the engine's clipped per-example sum `draws` times with
fresh fakes and interpolation weights (K per example, `--noise_multiplicity`), the real examples held
fixed. It prints, per K, for the averaged gradient of an expected batch of `batch_size`:
  - draw_var: the variance (summed over coordinates) that the fake/interpolation draws add, scaled
    from `examples` to `batch_size` examples (independent per example, so it scales as 1/batch);
  - dp_var: the DP noise's, d (z C / batch)^2;
  - signal: the norm of the mean clipped per-example gradient (over the examples and draws; <= C), the
    expected averaged gradient; with every example clipped it measures how well the examples' clipped
    directions agree, which averaging K draws before clipping can raise (DPDM's argument);
  - signal_over_dp_noise: signal / sqrt(dp_var), the averaged gradient's signal-to-noise ratio;
  - seconds: the median wall time of one clipped sum of the `examples` (interleaved over K).
No privacy is spent: this reads training examples to measure, it releases nothing but these numbers.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--latent_size", type=int, default=128)
    parser.add_argument("--noise_multiplier", type=float, default=3.215)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--draws", type=int, default=6)
    parser.add_argument("--ks", default="1,2,4,8")
    args = parser.parse_args()
    from tfpriv.data import load_dataset
    from tfpriv.gan.architectures import build_critic, build_generator
    from tfpriv.gan.wgan_gp import DPWGANGP, dp_adam
    from tfpriv.privacy.config import DPConfig
    from tfpriv.privacy.engine import DPGradientEngine
    from tfpriv.privacy.rng import in_step
    from tfpriv.training.runner import restore_networks

    generator = build_generator(args.capacity, args.latent_size, 10)
    critic = build_critic(args.capacity, 10)
    restore_networks(args.checkpoint, generator=generator, critic=critic)
    data = load_dataset("mnist", args.data_dir)
    pick = np.random.default_rng(0).choice(len(data.x_train), args.examples, replace=False)
    batch = {"image": tf.constant(data.x_train[pick]), "label": tf.constant(data.labels_train["label"][pick].astype(np.int32))}
    config = DPConfig(aggregation="micro", l2_norm_clip=args.clip, noise_multiplier=args.noise_multiplier,
                      expected_batch_size=float(args.batch_size), clipping="per_example", seed=0)
    models, engines, sums, per_example = {}, {}, {}, {}
    ks = [int(k) for k in args.ks.split(",")]
    for k in ks:
        model = DPWGANGP(generator, critic, latent_size=args.latent_size, num_classes=10, seed=k, noise_multiplicity=k)
        model.compile(dp_adam(1e-3), dp_adam(1e-3), dp=config, num_examples=len(data.x_train))
        models[k] = model
        engines[k] = DPGradientEngine(config, critic, model.spec, variables=critic.trainable_variables)
        sums[k], per_example[k] = [], []
    seconds = {k: [] for k in ks}
    for _ in range(args.draws):
        for k in ks:  # interleaved, so the machine's load falls on every K alike
            with in_step(models[k].rng):
                inputs = models[k].critic_inputs(batch)
            start = time.perf_counter()
            out = engines[k].clipped_sums(models[k].loss_fn, inputs)
            total = np.concatenate([g.numpy().ravel() for g in out["sample"]])
            seconds[k].append(time.perf_counter() - start)
            sums[k].append(total)
            per_example[k].append(np.sqrt(out["sample_sq_norms"].numpy()))
    d = sums[ks[0]][0].size
    dp_var = d * (args.noise_multiplier * args.clip / args.batch_size) ** 2
    scale = args.batch_size / args.examples / args.batch_size ** 2  # var of a sum of `examples` -> of the mean of `batch_size`
    for k in ks:
        stack = np.stack(sums[k])
        draw_var = float(stack.var(axis=0, ddof=1).sum()) * scale
        norms = np.concatenate(per_example[k])
        signal = float(np.linalg.norm(stack.mean(axis=0))) / args.examples
        print(json.dumps({
            "checkpoint": args.checkpoint, "K": k, "examples": args.examples, "draws": args.draws, "d": d,
            "draw_var": draw_var, "dp_var": dp_var, "draw_over_dp": draw_var / dp_var,
            "signal": signal, "signal_over_dp_noise": signal / np.sqrt(dp_var),
            "clipped_fraction": float((norms > args.clip).mean()), "median_norm": float(np.median(norms)),
            "seconds_median": float(np.median(seconds[k])), "seconds_min": float(np.min(seconds[k])),
            "seconds_max": float(np.max(seconds[k])),
        }), flush=True)


if __name__ == "__main__":
    main()
