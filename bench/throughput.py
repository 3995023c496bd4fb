"""Training throughput (examples/s) of every aggregation mode against non-private training.

All runs share one process and one fixed batch (B=256 by default, so Poisson variation does
not blur the comparison); each throughput is reported with its ratio to the non-private run
of the same model. Models:
  - MLP VAE  784-512-256-(2x10) / 10-256-512-784, sparse prior, Cauchy-MMD batch term (b=16)
  - conv VAE (tfpriv's 28x28 conv encoder/decoder, latent 50), same prior and batch term
  - MLP classifier 784-512-256-10: Keras non-private, tfpriv micro, TF Privacy's
    DPKerasSGDOptimizer (one microbatch per example), TF Privacy's DPSequential (fast
    clipping), and a tf.vectorized_map per-example-gradient loop.

Configurations are timed round-robin (every one once per round) and the median is reported,
so load that drifts during the run affects all of them alike.

    python bench/throughput.py [--batch_size=256] [--steps=20] [--repeats=3] [--out=bench/results.json]
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from tfpriv.models.architectures import build_architecture  # noqa: E402
from tfpriv.models.divergences import CauchyMMD  # noqa: E402
from tfpriv.models.priors import SparseMixture  # noqa: E402
from tfpriv.models.vae import VAE  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.terms import LossTerms, TermSpec  # noqa: E402
from tfpriv.training.dp_model import DPModel  # noqa: E402

flags.DEFINE_integer("batch_size", 256, "Batch size B.")
flags.DEFINE_integer("steps", 20, "Timed steps per configuration (slow baselines use fewer).")
flags.DEFINE_integer("repeats", 3, "Round-robin rounds; the median is reported.")
flags.DEFINE_string("out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"), "Output JSON.")
flags.DEFINE_string("only", "", "Comma-separated sections to run: mlp_vae, conv_vae, classifier, conv_classifier.")
FLAGS = flags.FLAGS

L = tf.keras.layers


class Timed:
    """A compiled model on a fixed batch; `run()` times `steps` steps and returns examples/s."""

    def __init__(self, model, x, steps: int, y=None):
        data = x if y is None else (x, y)
        self.ds = tf.data.Dataset.from_tensors(data).repeat()
        self.model, self.steps, self.n = model, steps, len(tf.nest.flatten(x)[0])
        model.fit(self.ds, steps_per_epoch=2, epochs=1, verbose=0)   # trace + warm-up

    def run(self) -> float:
        start = time.perf_counter()
        self.model.fit(self.ds, steps_per_epoch=self.steps, epochs=1, verbose=0)
        return self.steps * self.n / (time.perf_counter() - start)


def _round_robin(section: str, timed: dict, repeats: int) -> list[dict]:
    """Times every configuration once per round, `repeats` rounds; reports the median.

    Interleaving makes the ratios robust to load that drifts during the benchmark.
    """
    rates = {name: [] for name in timed}
    for _ in range(repeats):
        for name, t in timed.items():
            rates[name].append(t.run())
    rows = []
    for name, values in rates.items():
        rows.append({"model": section, "config": name, "examples_per_s": float(np.median(values)),
                     "rounds": [float(v) for v in values]})
        print(f"  {section:15s} {name:44s} {np.median(values):9.1f} ex/s", flush=True)
    return rows


def vae_section(kind: str, b: int, steps: int, repeats: int) -> list[dict]:
    shape = (28, 28, 1)
    x = (np.random.default_rng(0).random([b, *shape]) > 0.7).astype(np.float32)
    timed = {}
    configs = [
        ("none", None),
        ("micro (no batch term)", dict(aggregation="micro")),
        ("micro (+MMD, cross terms)", dict(aggregation="micro", max_batch_size=b)),
        ("batch", dict(aggregation="batch")),
        ("termwise", dict(aggregation="termwise", num_partitions=16)),
        ("termwise (reweight pass)", dict(aggregation="termwise", num_partitions=16, clipped_sum="reweight")),
    ]
    for name, kw in configs:
        tf.keras.utils.set_random_seed(0)
        if kind == "mlp":
            enc = tf.keras.Sequential([tf.keras.Input(shape), L.Flatten(), L.Dense(512, activation="relu"),
                                       L.Dense(256, activation="relu"), L.Dense(20)])
            dec = tf.keras.Sequential([tf.keras.Input([10]), L.Dense(256, activation="relu"),
                                       L.Dense(512, activation="relu"), L.Dense(784), L.Reshape(shape)])
            latent = 10
        else:
            enc, dec = build_architecture("conv", shape, 50)
            latent = 50
        with_mmd = not name.startswith("micro (no")
        vae = VAE(enc, dec, prior=SparseMixture(latent), alpha=100.0 if with_mmd else 0.0,
                  regularizer=CauchyMMD() if with_mmd else None)
        dp = None if kw is None else DPConfig(l2_norm_clip=1.0, batch_clip=0.1, noise_multiplier=1.0,
                                              expected_batch_size=b, verify=False, **kw)
        vae.compile(optimizer=tf.keras.optimizers.SGD(1e-3), dp=dp, num_examples=len(x) if dp else None)
        timed[name] = Timed(vae, x, steps)
    return _round_robin(f"{kind}_vae", timed, repeats)


def _mlp():
    tf.keras.utils.set_random_seed(0)
    return [L.Dense(512, activation="relu", input_shape=(784,)), L.Dense(256, activation="relu"), L.Dense(10)]


class _Classifier(DPModel):
    """The MLP classifier through tfpriv's engine (sample-wise cross-entropy)."""

    def __init__(self):
        super().__init__()
        self.net = tf.keras.Sequential(_mlp())

    def term_spec(self):
        return TermSpec(sample=("ce",))

    def loss_terms(self, data, layout, training=True):
        x, y = data
        logits = self.net(x, training=training)
        return LossTerms({"ce": tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)})


class _VectorizedLoop(tf.keras.Model):
    """Per-example gradients by tf.vectorized_map over examples, then clip, sum and noise."""

    def __init__(self):
        super().__init__()
        self.net = tf.keras.Sequential(_mlp())

    def train_step(self, data):
        x, y = data
        variables = self.net.trainable_variables

        def one(args):
            xi, yi = args
            with tf.GradientTape() as tape:
                loss = tf.keras.losses.sparse_categorical_crossentropy(yi[None], self.net(xi[None]), from_logits=True)
            grads = tape.gradient(loss, variables)
            norm = tf.linalg.global_norm(grads)
            return [g * tf.minimum(1.0, 1.0 / norm) for g in grads]

        per = tf.vectorized_map(one, (x, y))
        sums = [tf.reduce_sum(g, 0) for g in per]
        grads = [s / 256.0 + tf.random.normal(tf.shape(s), stddev=1.0 / 256.0) for s in sums]
        self.optimizer.apply_gradients(zip(grads, variables))
        return {}


def classifier_section(b: int, steps: int, repeats: int) -> list[dict]:
    from tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry
    from tensorflow_privacy.privacy.keras_models.dp_keras_model import DPSequential
    from tensorflow_privacy.privacy.optimizers.dp_optimizer_keras import DPKerasSGDOptimizer

    rng = np.random.default_rng(0)
    x = rng.random([b, 784]).astype(np.float32)
    y = rng.integers(0, 10, [b]).astype(np.int64)
    timed = {}
    model = tf.keras.Sequential(_mlp())
    model.compile(tf.keras.optimizers.SGD(1e-3), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timed["none (Keras)"] = Timed(model, x, steps, y)

    ours = _Classifier()
    ours.compile(tf.keras.optimizers.SGD(1e-3),
                 dp=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=b, verify=False),
                 num_examples=len(x))
    timed["tfpriv micro (ghost norms + book-keeping)"] = Timed(ours, (x, y), steps)

    fast = DPSequential(l2_norm_clip=1.0, noise_multiplier=1.0, layer_registry=layer_registry.make_default_layer_registry(),
                        layers=_mlp(), use_xla=False)
    fast.compile(tf.keras.optimizers.SGD(1e-3), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timed["TF Privacy DPSequential (fast clipping)"] = Timed(fast, x, steps, y)

    vec = _VectorizedLoop()
    vec.compile(tf.keras.optimizers.SGD(1e-3))
    timed["tf.vectorized_map per-example loop"] = Timed(vec, x, max(2, steps // 10), y)

    opt = DPKerasSGDOptimizer(l2_norm_clip=1.0, noise_multiplier=1.0, num_microbatches=b, learning_rate=1e-3)
    model = tf.keras.Sequential(_mlp())
    model.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"))
    timed[f"TF Privacy DPKerasSGDOptimizer ({b} microbatches)"] = Timed(model, x, 2, y)
    rows = _round_robin("mlp_classifier", timed, repeats)
    return rows


def conv_classifier_section(b: int, steps: int, repeats: int) -> list[dict]:
    """A small MNIST-sized convnet: Keras, `tfpriv.make_private` (ghost norms for Conv2D/Dense),
    and TF Privacy's DPKerasSGDOptimizer (its fast-clipping DPSequential has no Conv2D rule)."""
    from tensorflow_privacy import DPKerasSGDOptimizer

    import tfpriv

    def convnet():
        tf.keras.utils.set_random_seed(0)
        return tf.keras.Sequential([L.Input([28, 28, 1]), L.Conv2D(16, 5, strides=2, padding="same", activation="relu"),
                                    L.Conv2D(32, 5, strides=2, padding="same", activation="relu"), L.Flatten(),
                                    L.Dense(64, activation="relu"), L.Dense(10)])

    rng = np.random.default_rng(0)
    x = rng.random([b, 28, 28, 1], dtype=np.float32)
    y = rng.integers(0, 10, b).astype(np.int32)
    xent = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    timed = {}
    model = convnet()
    model.compile(tf.keras.optimizers.SGD(1e-3), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timed["none (Keras)"] = Timed(model, x, steps, y)
    ours = tfpriv.make_private(convnet(), loss=xent, config=DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                     noise_multiplier=1.0, verify=False),
                               num_examples=60000, batch_size=b)
    ours.compile(tf.keras.optimizers.SGD(1e-3))
    timed["tfpriv make_private (micro, ghost norms)"] = Timed(ours, x, steps, y)
    opt = DPKerasSGDOptimizer(l2_norm_clip=1.0, noise_multiplier=1.0, num_microbatches=b, learning_rate=1e-3)
    model = convnet()
    model.compile(opt, xent)
    timed[f"TF Privacy DPKerasSGDOptimizer ({b} microbatches)"] = Timed(model, x, 2, y)
    return _round_robin("conv_classifier", timed, repeats)


def main(argv):
    del argv
    b, steps, repeats = FLAGS.batch_size, FLAGS.steps, FLAGS.repeats
    sections = FLAGS.only.split(",") if FLAGS.only else ["mlp_vae", "conv_vae", "classifier", "conv_classifier"]
    rows = []
    print(f"tfpriv throughput, B={b}, {steps} timed steps, median of {repeats} round-robin rounds; "
          f"{os.cpu_count()} CPUs, TF {tf.__version__}, load average {os.getloadavg()[0]:.1f}", flush=True)
    if "mlp_vae" in sections:
        rows += vae_section("mlp", b, steps, repeats)
    if "conv_vae" in sections:
        rows += vae_section("conv", b, max(4, steps // 4), repeats)
    if "classifier" in sections:
        rows += classifier_section(b, steps, repeats)
    if "conv_classifier" in sections:
        rows += conv_classifier_section(b, steps, repeats)
    base = {}
    for r in rows:
        if r["config"].startswith("none"):
            base[r["model"]] = r["examples_per_s"]
    print(f"\n{'model':16s} {'configuration':44s} {'examples/s':>11s} {'ratio':>7s}")
    for r in rows:
        r["ratio_to_non_private"] = r["examples_per_s"] / base[r["model"]]
        print(f"{r['model']:16s} {r['config']:44s} {r['examples_per_s']:11.1f} {r['ratio_to_non_private']:7.3f}")
    record = {"load_average_at_end": os.getloadavg()[0], "batch_size": b, "timed_steps": steps, "repeats": repeats, "cpus": os.cpu_count(),
              "platform": platform.platform(), "tensorflow": tf.__version__,
              "command": "python bench/throughput.py " + " ".join(sys.argv[1:]), "rows": rows}
    with open(FLAGS.out, "w") as f:
        json.dump(record, f, indent=2)
    print(f"\nwritten to {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
