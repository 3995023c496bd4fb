"""Cost of the DP noise draw alone: ways to draw N(0, std^2) for every parameter of a model, timed
round-robin in one process (median and IQR of ms per draw and of the per-round speed-up over
TensorFlow's normal kernel called once per variable, the engine's draw before commit 606fe8e).

    python bench/noise_draw.py [--model=mlp_vae] [--rounds=21] [--out=bench/noise_draw.json]

Variants: `kernel per variable` (StatelessRandomNormalV2 per variable, the previous draw);
`engine` (DPGradientEngine._add_noise: one StreamGenerator.normal_once for all variables of a
dtype, split; Box-Muller as vectorized ops); `kernel, one draw` (the kernel once for all parameters); `uniform bits` (the
Philox uniforms alone: a floor for any transform of them); `kernel under XLA` (the kernel in a
`jit_compile` function). The kernel variants draw at a fresh seed from the engine's own generator
(`make_seeds`: a few scalar ops per draw).
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.engine import DPGradientEngine  # noqa: E402
from tfpriv.privacy.terms import TermSpec  # noqa: E402

flags.DEFINE_enum("model", "mlp_vae", ["mlp_vae", "mlp_classifier"], "Whose variable shapes (bench/throughput.py).")
flags.DEFINE_integer("rounds", 21, "Round-robin rounds.")
flags.DEFINE_string("out", "", "Output JSON (default bench/noise_draw.json).")
FLAGS = flags.FLAGS

HERE = os.path.dirname(os.path.abspath(__file__))
DRAWS_PER_ROUND = 5
SHAPES = {"mlp_vae": [(784, 512), (512,), (512, 256), (256,), (256, 20), (20,),
                      (10, 256), (256,), (256, 512), (512,), (512, 784), (784,)],
          "mlp_classifier": [(784, 512), (512,), (512, 256), (256,), (256, 10), (10,)]}


def variants(grads: list[tf.Variable]) -> dict:
    module = tf.Module()
    module.vars = grads
    engine = DPGradientEngine(DPConfig(aggregation="batch", l2_norm_clip=1.0, noise_multiplier=1.0,
                                       expected_batch_size=1.0, seed=0), module, TermSpec(sample=("x",)),
                              variables=grads)
    gen, std = engine.generator, engine.noise_stddev
    n = sum(int(np.prod(v.shape)) for v in grads)

    def seed():  # a fresh stateless seed from the engine's generator (its state advances)
        return gen.make_seeds(1)[:, 0]

    def kernel(shape):
        return tf.random.stateless_normal(shape, seed(), alg="philox") * std

    @tf.function(jit_compile=True)
    def xla_kernel(s):
        return tf.random.stateless_normal([n], s, alg="philox") * std

    def xla():
        return xla_kernel(seed())

    def uniform_bits():
        return tf.random.stateless_uniform([n], seed(), alg="philox")

    return {"kernel per variable": lambda: [g + kernel(tf.shape(g)) for g in grads],
            "engine": lambda: engine._add_noise([tf.identity(g) for g in grads]),
            "kernel, one draw": lambda: kernel([n]),
            "uniform bits": uniform_bits,
            "kernel under XLA": xla}, n


def main(argv):
    del argv
    grads = [tf.Variable(tf.zeros(s)) for s in SHAPES[FLAGS.model]]
    fns, n = variants(grads)
    fns = {k: tf.function(f) for k, f in fns.items()}
    for f in fns.values():
        f()
        f()
    load_start = os.getloadavg()[0]
    seconds = {k: [] for k in fns}
    for _ in range(FLAGS.rounds):
        for k, f in fns.items():
            start = time.perf_counter()
            for _ in range(DRAWS_PER_ROUND):
                f()
            seconds[k].append((time.perf_counter() - start) / DRAWS_PER_ROUND)
    load_end = os.getloadavg()[0]
    base = np.array(seconds["kernel per variable"])
    rows = []
    print(f"{FLAGS.model}: {n} parameters, {FLAGS.rounds} rounds; load average {load_start:.1f} -> {load_end:.1f}")
    for k, s in seconds.items():
        s = np.array(s)
        ms = np.percentile(s, [50, 25, 75]) * 1e3
        sp = np.percentile(base / s, [50, 25, 75])
        rows.append({"variant": k, "ms": dict(zip(("median", "q1", "q3"), ms)), "ns_per_parameter": ms[0] * 1e6 / n,
                     "speedup_over_kernel_per_variable": dict(zip(("median", "q1", "q3"), sp))})
        print(f"  {k:22s} {ms[0]:7.2f} ms [{ms[1]:.2f}, {ms[2]:.2f}]  {ms[0] * 1e6 / n:5.1f} ns/parameter"
              f"  speed-up {sp[0]:.2f} [{sp[1]:.2f}, {sp[2]:.2f}]")
    out = FLAGS.out or os.path.join(HERE, "noise_draw.json")
    with open(out, "w") as f:
        json.dump({"command": "python bench/noise_draw.py " + " ".join(sys.argv[1:]), "model": FLAGS.model,
                   "parameters": n, "rounds": FLAGS.rounds, "load_average_start": load_start,
                   "load_average_end": load_end, "tensorflow": tf.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
