"""Examples/s of `tfpriv.make_private` + `fit` against the same model's non-private `fit`, on three
models people write: a small convnet (MNIST-shaped), an Embedding -> LSTM text classifier and a
2-block transformer encoder.

Each model is built twice from the same seed (one wrapped by `make_private`, clipping "auto", micro,
C = 1, z = 1, Poisson batches of expected size B; one compiled as it is) and each side runs
`fit(epochs=1)` over N = B * steps examples. After one untimed `fit` per side (tracing), the sides
take turns for `--rounds` rounds; a row reports the median and IQR over rounds of examples/s and of
the per-round ratio private / non-private (higher is better), with the 1-minute load average at
its start and end. The reference is `bench/opacus_models.py` (the same models in PyTorch with
Opacus, same B and shapes).

The builders take the Keras module as an argument, so the same functions build Keras 3 models
(`import keras`) once `make_private` accepts them.

    python bench/make_private_models.py [--batch_size=256] [--steps=2] [--rounds=3] [--only=convnet,lstm]
        [--out=experiments/throughput/make_private_models.jsonl]
    python bench/make_private_models.py --quick     # smoke test: tiny sizes, structure only
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

import tfpriv  # noqa: E402
from bench.model_sizes import QUICK_SIZES, SIZES  # noqa: E402
from bench.rounds import interleaved, load_average, print_row, summary  # noqa: E402
from tfpriv.compat import keras as tf_keras  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 256, "B: expected (private) and fixed (non-private) batch size")
flags.DEFINE_integer("steps", 2, "steps per timed fit (N = B * steps examples)")
flags.DEFINE_integer("rounds", 3, "interleaved rounds")
flags.DEFINE_list("only", [], "models to run (default: all of MODELS)")
flags.DEFINE_string("out", "experiments/throughput/make_private_models.jsonl", "JSON lines appended here")
flags.DEFINE_bool("quick", False, "smoke test: tiny models and batches, one round")


def convnet(keras, s: dict):
    """Conv2D(16, 3, /2) -> Conv2D(32, 3, /2) -> Dense(10) on [image, image, 1]."""
    L = keras.layers
    return keras.Sequential([L.Input([s["image"], s["image"], 1]), L.Conv2D(16, 3, strides=2, activation="relu"),
                             L.Conv2D(32, 3, strides=2, activation="relu"), L.Flatten(), L.Dense(10)])


def lstm(keras, s: dict):
    """Embedding(vocab, width) -> LSTM(width) -> Dense(2) on [length] token ids."""
    L = keras.layers
    return keras.Sequential([L.Input([s["length"]], dtype="int32"), L.Embedding(s["vocab"], s["width"]),
                             L.LSTM(s["width"]), L.Dense(2)])


def positions(length: int, width: int) -> np.ndarray:
    """Sinusoidal position encodings [1, length, width] (fixed, no weights)."""
    pos, i = np.arange(length)[:, None], np.arange(width)[None, :]
    angle = pos / np.power(10_000.0, (2 * (i // 2)) / width)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))[None].astype(np.float32)


def transformer(keras, s: dict, blocks: int = 2):
    """Embedding + sinusoidal positions -> `blocks` post-norm encoder blocks (self-attention, FFN of
    2 * width) -> mean over positions -> Dense(2)."""
    L = keras.layers
    tokens = L.Input([s["length"]], dtype="int32")
    h = L.Embedding(s["vocab"], s["width"])(tokens) + positions(s["length"], s["width"])
    for _ in range(blocks):
        attention = L.MultiHeadAttention(num_heads=s["heads"], key_dim=s["width"] // s["heads"])(h, h)
        h = L.LayerNormalization()(h + attention)
        ffn = L.Dense(s["width"])(L.Dense(2 * s["width"], activation="relu")(h))
        h = L.LayerNormalization()(h + ffn)
    return keras.Model(tokens, L.Dense(2)(L.GlobalAveragePooling1D()(h)))


MODELS = {"convnet": convnet, "lstm": lstm, "transformer": transformer}


def data(model: str, n: int, s: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if model == "convnet":
        return rng.random((n, s["image"], s["image"], 1), dtype=np.float32), rng.integers(0, 10, n)
    return rng.integers(0, s["vocab"], (n, s["length"])).astype(np.int32), rng.integers(0, 2, n)


def fits(name: str, s: dict, b: int, steps: int, keras=tf_keras) -> dict:
    """{"private": fit once, "non-private": fit once}, each traced by one untimed fit first."""
    n = b * steps
    x, y = data(name, n, s)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras.utils.set_random_seed(0)
    private = tfpriv.make_private(MODELS[name](keras, s), loss,
                                  tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                  num_examples=n, batch_size=b, delta=1e-5)
    private.compile(optimizer="adam")
    keras.utils.set_random_seed(0)
    plain = MODELS[name](keras, s)
    plain.compile(optimizer="adam", loss=loss)

    def run_private() -> int:
        private.fit(x, y, epochs=1, verbose=0)
        return n  # N/B Poisson batches: N examples in expectation

    def run_plain() -> int:
        plain.fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False)
        return n

    run_private(), run_plain()
    return {"private": run_private, "non-private": run_plain}


def main(argv):
    del argv
    s, b, steps, rounds = SIZES, FLAGS.batch_size, FLAGS.steps, FLAGS.rounds
    if FLAGS.quick:
        s, b, steps, rounds = QUICK_SIZES, 8, 1, 1
    header = {"command": "python bench/make_private_models.py " + " ".join(sys.argv[1:]),
              "tensorflow": tf.__version__, "cpus": os.cpu_count(), "batch_size": b, "steps": steps, "sizes": s}
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    for name in FLAGS.only or list(MODELS):
        start = load_average()
        rates = interleaved(fits(name, s, b, steps), rounds)
        row = summary("tfpriv", name, rates["private"], rates["non-private"], **header,
                      load_average_start=start, load_average_end=load_average())
        print_row(row)
        with open(FLAGS.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    app.run(main)
