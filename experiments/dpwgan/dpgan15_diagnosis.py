"""Issue #15, DPGAN diagnosis: the private critic's signal against its noise, and weight saturation.

    python experiments/dpwgan/dpgan15_diagnosis.py signal --steps=20 --out=diag.json   # at init and after N steps
    python experiments/dpwgan/dpgan15_diagnosis.py trained RUN_DIR [RUN_DIR ...]       # trained runs' last checkpoints

For the conditional critic on real MNIST batches of B = 256 (fixed-size batches: a diagnosis, not
a release): per-example gradient norms (the engine's fast path), the norm of the mean clipped
gradient ("signal") and of the noise the mechanism adds to that mean, z C sqrt(P) / B, and the
share of critic weights at +-c_p (np.isclose). `signal` uses z = 0.478 (epsilon = 10 after 1,000
steps at q = 256/60000), measures at initialisation, takes N RMSProp steps (lr 5e-4) and measures
again; `trained` restores a `train.py` run's last checkpoint (critic and generator) and uses its z, C.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

B, Z = 256, 0.478
CONFIGS = [  # capacity, C, make_dpgan kwargs
    (32, 1.0, {}), (32, 0.1, {}), (16, 0.1, {}), (16, 0.1, {"gan_loss": "logistic", "weight_clip": 0.0})]


def batches(data_dir: str):
    from tfpriv.data import load_dataset
    data = load_dataset("mnist", data_dir)
    x, y = data.x_train.astype(np.float32), data.labels_train["label"].astype(np.int32)
    rng = np.random.default_rng(0)

    def batch():
        i = rng.choice(len(x), B, replace=False)
        return {"image": tf.constant(x[i]), "label": tf.constant(y[i])}
    return batch


def private_dpgan(capacity: int, clip: float, z: float, batch, **kwargs):
    from tfpriv.gan.dpgan import make_dpgan, rmsprop
    from tfpriv.privacy.config import DPConfig
    model = make_dpgan(capacity, 128, 10, critic_steps=1, seed=0, generator_batch_size=B, **kwargs)
    dp = DPConfig(aggregation="micro", l2_norm_clip=clip, noise_multiplier=z, expected_batch_size=float(B),
                  clipping="fast", seed=0, verify=False)
    model.compile(rmsprop(5e-4), rmsprop(5e-4), dp=dp, num_examples=60000)
    model.prepare(batch())
    return model


def measure(model, clip: float, z: float, batch) -> dict:
    out = model.engine.clipped_sums(model.loss_fn, model.critic_inputs(batch()))
    norms = np.sqrt(out["sample_sq_norms"].numpy())
    mean_clipped = np.sqrt(sum(float(tf.reduce_sum(tf.square(g))) for g in out["sample"])) / B
    size = sum(int(np.prod(v.shape)) for v in model.critic.trainable_variables)
    noise = z * clip * np.sqrt(size) / B
    w = np.concatenate([v.numpy().ravel() for v in model.critic.trainable_variables])
    at_clip = float(np.mean(np.isclose(np.abs(w), model.weight_clip))) if model.weight_clip > 0 else float("nan")
    return {"P": size, "norm_p10": float(np.percentile(norms, 10)), "norm_median": float(np.median(norms)),
            "norm_p90": float(np.percentile(norms, 90)), "clipped_frac": float(np.mean(norms > clip)),
            "signal_mean_clipped_grad": mean_clipped, "noise_norm": noise, "snr": mean_clipped / noise,
            "weights_at_clip": at_clip}


def signal(steps: int, data_dir: str) -> list[dict]:
    batch, rows = batches(data_dir), []
    for capacity, clip, kwargs in CONFIGS:
        model = private_dpgan(capacity, clip, Z, batch, **kwargs)
        step = tf.function(model.train_step)
        row = {"capacity": capacity, "C": clip, "private": True, **kwargs, "init": measure(model, clip, Z, batch)}
        start = time.time()
        for _ in range(steps):
            step(batch())
        row[f"after_{steps}"] = measure(model, clip, Z, batch)
        row["seconds"] = time.time() - start
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def trained(run_dir: str, data_dir: str) -> dict:
    from tfpriv.training.runner import restore_networks
    with open(os.path.join(run_dir, "results.json")) as f:
        results = json.load(f)
    s = results["gan"]
    batch = batches(data_dir)
    model = private_dpgan(s["capacity"], s["l2_norm_clip"], s["noise_multiplier"], batch,
                          gan_loss=s.get("gan_loss", "wasserstein"), weight_clip=s["weight_clip"])
    restore_networks(tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")),
                     critic=model.critic, generator=model.generator)  # not the optimizers: they may differ
    return {"run": os.path.basename(os.path.normpath(run_dir)), "critic_steps": results["training"]["critic_steps"],
            "C": s["l2_norm_clip"], "z": s["noise_multiplier"],
            **measure(model, s["l2_norm_clip"], s["noise_multiplier"], batch)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cmd", choices=("signal", "trained"))
    parser.add_argument("runs", nargs="*", help="trained: run directories")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--out", default=None, help="also write the rows here (JSON)")
    args = parser.parse_args()
    rows = signal(args.steps, args.data_dir) if args.cmd == "signal" else [trained(r, args.data_dir) for r in args.runs]
    if args.cmd == "trained":
        for row in rows:
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
