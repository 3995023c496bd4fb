"""Issue #36, the start-up collapse: the generator's pre-sigmoid values in a run's checkpoint.

    python experiments/frontier/generator_logits.py RUN_DIR/checkpoints/ckpt-10 [--capacity=32]

Restores the (training, not EMA) generator of a conditional DP-WGAN-GP checkpoint, draws 512 latents
(labels 0..9 in turn, numpy seed 0) and prints the step, the mean and 5th/95th percentiles of the
last layer's output x (the image is sigmoid(x)), the mean sigmoid'(x), the mean pixel and the mean
per-pixel standard deviation across samples (0: every sample is the same image).
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--latent_size", type=int, default=128)
    args = parser.parse_args()
    from tfpriv.compat import keras
    from tfpriv.gan.architectures import build_generator
    from tfpriv.gan.saturation import LOGITS_LAYER
    from tfpriv.training.runner import restore_networks

    generator = build_generator(args.capacity, args.latent_size, 10)
    step = restore_networks(args.checkpoint, generator=generator)
    logits_model = keras.Model(generator.inputs, generator.get_layer(LOGITS_LAYER).output)
    latent = np.random.default_rng(0).normal(size=(512, args.latent_size)).astype(np.float32)
    x = logits_model([latent, np.arange(512, dtype=np.int32) % 10]).numpy().astype(np.float64)
    image = 0.5 * (1.0 + np.tanh(0.5 * x))  # sigmoid without overflow
    print(json.dumps({
        "checkpoint": args.checkpoint,
        "step": step,
        "x_mean": round(float(x.mean()), 2),
        "x_p5": round(float(np.percentile(x, 5)), 2), "x_p95": round(float(np.percentile(x, 95)), 2),
        "mean_sigmoid_derivative": float((image * (1.0 - image)).mean()),
        "pixel_mean": round(float(image.mean()), 4),
        "pixel_std_across_samples": round(float(image.std(axis=0).mean()), 4),
    }))


if __name__ == "__main__":
    main()
