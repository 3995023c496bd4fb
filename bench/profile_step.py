"""Where a private step's time goes: cumulative sub-steps of the fast (ghost-norm) path.

Each stage is a `tf.function` that repeats the previous stages and adds one (forward with layer
taps; the backward passes to the layer outputs; per-layer factors; per-example norms;
per-partition or micro norms; the clipped sums without noise; the whole privatized gradient;
and the noise draw alone), timed round-robin with the non-private gradient (forward +
backward) of the same model; printed as median seconds and median [IQR] of the per-round
ratios to the non-private gradient. Differences between consecutive stages are the cost of
the stage.

    python bench/profile_step.py [--architecture=conv] [--aggregation=termwise] [--batch_size=256] [--rounds=7]
    python bench/profile_step.py --architecture=conv_classifier    # tfpriv.make_private, micro
    python bench/profile_step.py --architecture=transformer        # bench/make_private_models.py's models

The VAEs (mlp, conv) carry the MMD batch term; the classifiers (bench/throughput.py's MLP classifier
on tfpriv's engine, its conv classifier and bench/make_private_models.py's models behind
`tfpriv.make_private`) have only a per-example loss, so they have no group-norm stage and are micro.
(--batch_size and --rounds are bench/throughput.py's flags.)
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from bench.throughput import IMAGE, _Classifier, _convnet, _vae  # noqa: E402
from tfpriv.compat import keras  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402

USER_MODELS = ("convnet", "lstm", "gru", "transformer")  # bench/make_private_models.py's, behind make_private
flags.DEFINE_enum("architecture", "conv", ["conv", "mlp", "mlp_classifier", "conv_classifier", *USER_MODELS],
                  "A model of bench/throughput.py or bench/make_private_models.py.")
flags.DEFINE_enum("aggregation", "termwise", ["termwise", "micro"], "Private mode (with the MMD batch term).")
flags.DEFINE_bool("dynamic_batch", True, "Trace the stages for any batch size, as a private fit does (Poisson "
                  "batches); --nodynamic_batch traces them for the fixed batch's shape.")
FLAGS = flags.FLAGS


def stages(model, engine, batch, dynamic: bool) -> dict:
    """The stages as `tf.function`s of the batch. `dynamic`: traced for any batch size, as a private
    `fit` traces its step (Poisson batches vary in size); else for this batch's shape."""

    def size(x):
        return tf.shape(tf.nest.flatten(x)[0])[0]

    def fast_pass(x):
        b = size(x)
        return engine._pass(model.loss_fn, x, engine.layout(b), b)[0]

    def non_private(x):
        layout = engine.layout(size(x))
        with tf.GradientTape() as tape:
            terms = model.loss_fn(x, layout)
            loss = tf.reduce_mean(terms.sample_total()) + tf.reduce_mean(terms.batch_total(layout.num_partitions))
        return tape.gradient(loss, engine.variables)

    def forward(x):
        return engine._forward(model.loss_fn, x, engine.layout(size(x)))[2]

    def backward(x):
        p = fast_pass(x)
        return [g for g in p.g_phi + (p.g_psi or []) if g is not None]

    def factors(x):
        p = fast_pass(x)
        kinds = ("phi", "psi") if engine.batch_terms else ("phi",)
        found = [q for which in kinds for q in p._quantities(which).values()]
        return [t for _, q in found for t in tf.nest.flatten(q) if t is not None]

    def sample_norms(x):
        return fast_pass(x).sample_sq_norms()

    def group_norms(x):
        p = fast_pass(x)
        return p.sample_sq_norms(), (p.micro_sq_norms() if engine.config.aggregation == "micro"
                                     else p.partition_sq_norms())

    def without_noise(x):
        add_noise = engine._add_noise
        engine._add_noise = lambda grads, psi_reaches=None: grads   # at trace time only: the graph has no noise
        try:
            return engine.gradients(model.loss_fn, x)[0]
        finally:
            engine._add_noise = add_noise

    def whole(x):
        return engine.gradients(model.loss_fn, x)[0]

    def noise_alone(x):
        del x
        return engine._add_noise([tf.zeros_like(v) for v in engine.variables])

    fns = {"non-private gradient": non_private, "forward with taps": forward,
           "+ backward to layer outputs": backward, "+ per-layer factors": factors,
           "+ per-example norms": sample_norms, "+ group norms": group_norms,
           "+ clipped sums (no noise)": without_noise, "whole private gradient": whole,
           "noise alone": noise_alone}
    if not engine.batch_terms:
        del fns["+ group norms"]
    spec = tf.nest.map_structure(
        lambda t: tf.TensorSpec([None if dynamic else t.shape[0], *t.shape[1:]], t.dtype), batch)
    return {k: tf.function(f, input_signature=[spec]) for k, f in fns.items()}


def _model_and_batch(architecture: str, aggregation: str, b: int):
    """The compiled private model and a fixed batch (the VAEs with the MMD term, `aggregation`)."""
    rng = np.random.default_rng(0)
    if architecture == "mlp_classifier":
        model = _Classifier()
        model.compile(keras.optimizers.SGD(1e-3), num_examples=b,
                      dp=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0, expected_batch_size=b,
                                  verify=False))
        return model, (tf.constant(rng.random([b, 784], dtype=np.float32)), tf.constant(rng.integers(0, 10, b)))
    if architecture in USER_MODELS:
        import tfpriv
        from bench import model_sizes, user_models as user
        xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        model = tfpriv.make_private(user.MODELS[architecture](keras, model_sizes.SIZES), loss=xent, num_examples=60000,
                                    batch_size=b, config=DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                  noise_multiplier=1.0))
        model.compile(keras.optimizers.SGD(1e-3))
        x, y = user.data(architecture, b, model_sizes.SIZES)
        return model, (tf.constant(x), tf.constant(y))
    if architecture == "conv_classifier":
        import tfpriv
        xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        model = tfpriv.make_private(_convnet(), loss=xent, num_examples=60000, batch_size=b,
                                    config=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0,
                                                    verify=False))
        model.compile(keras.optimizers.SGD(1e-3))
        return model, (tf.constant(rng.random([b, *IMAGE], dtype=np.float32)),
                       tf.constant(rng.integers(0, 10, b).astype(np.int32)))
    kw = (dict(aggregation="termwise", num_partitions=16) if aggregation == "termwise"
          else dict(aggregation="micro", max_batch_size=b))
    vae = _vae(architecture, 1, with_mmd=True)
    vae.compile(keras.optimizers.SGD(1e-3), num_examples=b,
                dp=DPConfig(l2_norm_clip=1.0, batch_clip=0.1, noise_multiplier=1.0, expected_batch_size=b,
                            verify=False, **kw))
    return vae, tf.constant((rng.random([b, *IMAGE]) > 0.7).astype(np.float32))


def main(argv):
    del argv
    b = FLAGS.batch_size
    model, x = _model_and_batch(FLAGS.architecture, FLAGS.aggregation, b)
    engine = model.prepare(x)
    fns = stages(model, engine, x, FLAGS.dynamic_batch)
    for f in fns.values():
        f(x)
        f(x)
    load = os.getloadavg()[0]
    seconds = {k: [] for k in fns}
    for _ in range(FLAGS.rounds):
        for k, f in fns.items():
            start = time.perf_counter()
            f(x)
            seconds[k].append(time.perf_counter() - start)
    base = np.array(seconds["non-private gradient"])
    mode = "micro" if FLAGS.architecture.endswith("classifier") or FLAGS.architecture in USER_MODELS else FLAGS.aggregation
    shape = "any batch size" if FLAGS.dynamic_batch else "static batch shape"
    print(f"{FLAGS.architecture}, {mode}, B={b}, traced for {shape}; load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    for k, s in seconds.items():
        q1, med, q3 = np.percentile(np.array(s) / base, [25, 50, 75])
        print(f"  {k:30s} {np.median(s) * 1e3:8.1f} ms   ratio to non-private gradient {med:5.2f} [{q1:.2f}, {q3:.2f}]")


if __name__ == "__main__":
    app.run(main)
