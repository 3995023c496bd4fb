"""Run in a fresh process: each family trained by `fit_private` (and a Keras LSTM classifier by
`make_private` and `fit`: with clipping="per_example", whose per-example gradients run one example after
another, `map_examples`; and with clipping="fast", the LSTM rule, noise on: the one noise the first
replica adds must be one device's) for 4 Poisson steps without noise on one device and under
MirroredStrategy over 2 logical CPUs, same data and seeds. Prints JSON:
per family, the largest weight difference between the two runs (and the largest weight), the
steps each run's ledger counted and, for the LSTM classifiers, the LSTM's rule on each run.
Families given as arguments, else all."""
import json
import sys
import tempfile
import types

import numpy as np

import tfpriv
from tfpriv.compat import keras
from tfpriv.training.distribute import make_strategy, split_cpu

split_cpu(2)

from tfpriv.filter.stage1 import build_stage1_vae  # noqa: E402
from tfpriv.gan.dpgan import make_dpgan, rmsprop  # noqa: E402
from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp  # noqa: E402
from tfpriv.privae.architectures import build_architecture  # noqa: E402
from tfpriv.privae.divergences import make_divergence  # noqa: E402
from tfpriv.privae.priors import make_prior  # noqa: E402
from tfpriv.privae.vae import VAE  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.training.runner import fit_private, plan_privacy  # noqa: E402

N, B, EPOCHS = 64, 16, 1  # 4 Poisson steps


def vae():
    enc, dec = build_architecture("mlp", [12], 3)
    model = VAE(enc, dec, prior=make_prior("sparse", 3), alpha=5.0, regularizer=make_divergence("mmd"))
    cfg = dict(aggregation="termwise", l2_norm_clip=1.0, batch_clip=0.5, num_partitions=0)
    x = (np.random.default_rng(0).random([N, 12]) > 0.5).astype(np.float32)
    return model, cfg, x, keras.optimizers.SGD(0.5)


def filter_stage1():
    data = types.SimpleNamespace(name="adult", x_train=np.random.default_rng(1).random([N, 10]).astype(np.float32),
                                 likelihood="gaussian")
    return build_stage1_vae(data, latent_dim=2), dict(aggregation="micro", l2_norm_clip=1.0), data.x_train, \
        keras.optimizers.SGD(0.5)


def _gan(make, opt):
    """8x8 images: the critic's and generator's layers of 28x28 ones (but the generator's crop), a fraction
    of their cost; replicas do not depend on the image size."""
    model = make(capacity=2, latent_size=4, num_classes=10, critic_steps=1, seed=0, generator_batch_size=5,
                 image_shape=(8, 8, 1))
    rng = np.random.default_rng(2)
    arrays = (rng.random([N, 8, 8, 1]).astype(np.float32), rng.integers(0, 10, N).astype(np.int32))
    return model, dict(aggregation="micro", l2_norm_clip=1.0), arrays, (opt(1e-2), opt(1e-2))


def dpwgan_gp():
    """per_example clipping in chunks of 5 (each replica's 8 examples: 5 and 3)."""
    model, cfg, arrays, opts = _gan(make_dpwgan_gp, dp_adam)
    return model, {**cfg, "clipping": "per_example", "per_example_chunk": 5}, arrays, opts


def dpgan():
    return _gan(make_dpgan, rmsprop)


def lstm_make_private(clipping: str = "per_example", noise_multiplier: float = 0.0):
    """Embedding -> LSTM -> Dense through `make_private` (per_example: pfor cannot vectorize the LSTM's
    backward pass; fast: the LSTM rule)."""
    L = keras.layers
    model = keras.Sequential([L.Input([6], dtype="int32"), L.Embedding(50, 8), L.LSTM(8, name="lstm"), L.Dense(3)])
    config = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=noise_multiplier, clipping=clipping,
                      seed=5)
    dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), config,
                                   num_examples=N, batch_size=B, delta=1e-3)
    dp_model.compile(optimizer=keras.optimizers.SGD(0.5))
    rng = np.random.default_rng(3)
    return dp_model, (rng.integers(0, 50, (N, 6)).astype(np.int32), rng.integers(0, 3, N))


FAMILIES = {"vae": vae, "filter_stage1": filter_stage1, "dpwgan_gp": dpwgan_gp, "dpgan": dpgan,
            "lstm_make_private": lstm_make_private, "lstm_rule": lambda: lstm_make_private("fast", 1.0)}


def run(family: str, strategy):
    if family.startswith("lstm_"):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model, (x, y) = FAMILIES[family]()
        model.fit(x, y, epochs=EPOCHS, verbose=0, seed=7)
        recorder = model.engine.recorder
        rule = None if recorder is None else next(recorder.rules[id(layer)].name for layer in recorder.layers
                                                  if layer.name == "lstm")
        return np.concatenate([w.ravel() for w in model.get_weights()]), {"steps": int(model.step_count.numpy()),
                                                                          "rule": rule}
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model, cfg, arrays, opt = FAMILIES[family]()
        plan = plan_privacy(DPConfig(noise_multiplier=0.0, seed=5, **cfg), model.term_spec(), N, B, EPOCHS,
                            delta=1e-3)
        with tempfile.TemporaryDirectory() as out:
            fit = fit_private(model, arrays, plan, opt, out, seed=7, verbose=0)
    return np.concatenate([w.ravel() for w in model.get_weights()]), fit


def main(families):
    two = make_strategy("mirrored")
    one = make_strategy("default")
    out = {"replicas": two.num_replicas_in_sync}
    for family in families:
        w1, fit1 = run(family, one)
        w2, fit2 = run(family, two)
        out[family] = {"max_diff": float(np.max(np.abs(w1 - w2))), "scale": float(np.max(np.abs(w1))),
                       "steps": [fit1["steps"], fit2["steps"]]}
        if family.startswith("lstm_"):
            out[family]["rule"] = [fit1["rule"], fit2["rule"]]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:] or list(FAMILIES))
