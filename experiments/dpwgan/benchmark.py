"""Throughput of a DP-WGAN-GP critic step, and where its time goes.

    python experiments/dpwgan/benchmark.py --capacity=32 --batch_size=128 --parts=batch,per_example,jacobian,step
    python experiments/dpwgan/benchmark.py --batch_size=512 --parts=step --generator_capacity=64   # a wider generator

Parts (each timed after one warm-up call, on a fixed batch of `batch_size` examples):
  batch        non-private gradient of the summed critic loss (the floor);
  per_example  per-example gradients as the engine's clipping="per_example" path takes them
               (each example's loss alone under tf.vectorized_map: O(B));
  jacobian     per-example gradients as the engine's clipping="vectorized" path takes them
               (tape.jacobian of the [B] losses: O(B^2));
  engine       the engine's privatized critic gradient (clip, sum, noise) with --clipping;
  step         a whole private train step (critic step + generator step) with --clipping.
Prints one JSON line per part with seconds per call and the load average when it ran.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

PARTS = ("batch", "per_example", "jacobian", "engine", "step")


def _time(fn, reps: int) -> tuple[float, float]:
    start = time.time()
    fn()
    first = time.time() - start
    start = time.time()
    for _ in range(reps):
        fn()
    return first, (time.time() - start) / reps


def benchmark(capacity: int, batch_size: int, parts: list[str], conditional: bool = True, reps: int = 3,
              clipping: str = "per_example", generator_capacity: int | None = None) -> list[dict]:
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"--parts: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    import tensorflow as tf

    from tfpriv.gan.architectures import generator_width
    from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp
    from tfpriv.privacy.clipping import jacobian as jacobian_rows
    from tfpriv.privacy.config import DPConfig
    from tfpriv.privacy.per_example import example_gradients
    from tfpriv.privacy.terms import BatchLayout

    model = make_dpwgan_gp(capacity=capacity, num_classes=10 if conditional else None, seed=0,
                           generator_capacity=generator_capacity)
    model.compile(dp_adam(4e-4), dp_adam(4e-4), DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=0.5,
                                                        expected_batch_size=float(batch_size), clipping=clipping,
                                                        seed=0, verify=False), num_examples=60000)
    rng = np.random.default_rng(0)
    batch = {"image": tf.constant(rng.random((batch_size, 28, 28, 1), dtype=np.float32))}
    if conditional:
        batch["label"] = tf.constant(rng.integers(0, 10, batch_size).astype(np.int32))
    model.prepare(batch)
    inputs = model.critic_inputs(batch)
    variables = model.critic.trainable_variables
    layout = BatchLayout.single(batch_size)

    def loss(x):
        return model.loss_fn(x, layout).sample_total()

    def batch_grad():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(loss(inputs))
        return tape.gradient(total, variables)

    def per_example():
        return example_gradients(model.loss_fn, inputs, variables, model.spec, tf.constant(batch_size))[0]

    def jacobian():
        with tf.GradientTape() as tape:
            per = loss(inputs)
        return jacobian_rows(tape, per, variables)

    fns = {"batch": batch_grad, "per_example": per_example, "jacobian": jacobian,
           "engine": lambda: model.engine.gradients(model.loss_fn, model.private_inputs(batch))[0], "step": lambda: model.train_step(batch)}
    out = []
    for part in parts:
        first, sec = _time(tf.function(fns[part]), reps)
        rec = {"part": part, "capacity": capacity, "generator_capacity": generator_width(capacity, generator_capacity),
               "batch_size": batch_size, "conditional": conditional,
               "seconds_per_call": sec, "first_call_seconds": first, "load_average_1min": os.getloadavg()[0]}
        if part in ("engine", "step"):
            rec["clipping"] = clipping
        print(json.dumps(rec), flush=True)
        out.append(rec)
    return out


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--generator_capacity", type=int, default=None, help="default: --capacity")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--parts", default="batch,per_example,step")
    parser.add_argument("--clipping", default="per_example", help="the engine's path for the engine/step parts")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--unconditional", action="store_true")
    args = parser.parse_args(argv)
    benchmark(args.capacity, args.batch_size, args.parts.split(","), not args.unconditional, args.reps, args.clipping,
              args.generator_capacity)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
