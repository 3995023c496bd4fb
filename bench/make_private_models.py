"""Examples/s of `tfpriv.make_private` + `fit` against the same model's non-private `fit`, on the
models people write: a small convnet (MNIST-shaped), an Embedding -> LSTM (or GRU) text classifier, a
2-block transformer encoder, and the README's MLP on the bundled digits (B = 64, fits of 10 epochs:
the fixed cost of a step, which small models show).

Each model is built twice from the same seed (one wrapped by `make_private`, clipping "auto", micro, C = 1, z =
1, Poisson batches of expected size B; one compiled as it is) and each side runs `fit(epochs=1)` over N = B *
steps examples (20 steps by default: with 2, as before, Keras' own set-up of a `fit` call, its data handler and
iterator, about 47 ms here, took as long as two convnet steps, and the rows timed that more than the steps). The
non-private side fits the same batches in order (no shuffle) from a `tf.data` pipeline with the options of
tfpriv's own (`tfpriv.data.batches.pipeline_options`). After one untimed `fit` per side (tracing), the sides
take turns for `--rounds` rounds; a row reports the median and IQR over rounds of examples/s and of the
per-round ratio private / non-private (higher is better), with the 1-minute load average at its start and end,
and the seconds of each side's first fit (tracing, and for the private side the engine's check of its clipping
path) with their ratio `first_fit_ratio` (private / non-private). Each side's first fit, an epoch of
`--first_fit_steps` steps (2: its one-time costs, not the steps), is timed in a fresh process of its own
(`--first_fit_of`), as a user's script meets it, the sides taking turns, in alternating order, for
`--first_fit_rounds` rounds (medians of the seconds and of the per-round ratios). In the process of the rounds
the side that fits first pays the process's one-time costs (TensorFlow's first trace and graph optimisation,
Keras' first `fit`), which `first_fit_seconds_in_process` (the private side first, after the models before it)
still shows. The reference is `bench/opacus_models.py` (the same models in PyTorch with Opacus, same B and
shapes).

The builders take the Keras module as an argument: `--keras=3` builds every model in Keras 3
(`import keras`, which `make_private` returns as a Keras 3 model).

    python bench/make_private_models.py [--batch_size=256] [--steps=20] [--rounds=3] [--only=convnet,lstm]
        [--first_fit_rounds=5] [--first_fit_steps=2] [--keras=2] [--threads=2]
        [--out=experiments/throughput/make_private_models.jsonl]
    python bench/make_private_models.py --quick     # smoke test: tiny sizes, structure only
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

import tfpriv  # noqa: E402
from bench.model_sizes import QUICK_SIZES, SIZES  # noqa: E402
from bench.rounds import interleaved, load_average, print_row, quantiles, summary  # noqa: E402
from bench.user_models import MODELS, data  # noqa: E402
from tfpriv.compat import keras as tf_keras  # noqa: E402
from tfpriv.data.batches import pipeline_options  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 256, "B: expected (private) and fixed (non-private) batch size")
flags.DEFINE_integer("steps", 20, "steps per timed fit (N = B * steps examples)")
flags.DEFINE_integer("first_fit_steps", 2, "steps of each fresh process's first fit (N = B * steps examples)")
flags.DEFINE_integer("rounds", 3, "interleaved rounds")
flags.DEFINE_list("only", [], "models to run (default: all of MODELS)")
flags.DEFINE_string("out", "experiments/throughput/make_private_models.jsonl", "JSON lines appended here")
flags.DEFINE_bool("quick", False, "smoke test: tiny models and batches, one round")
flags.DEFINE_enum("keras", "2", ["2", "3"], "the Keras the models are built in (2: tf_keras; 3: keras)")
flags.DEFINE_integer("threads", os.cpu_count(), "TensorFlow's intra- and inter-op threads (as opacus_models.py)")

flags.DEFINE_integer("first_fit_rounds", 5, "rounds of first fits, each side in a fresh process (1 with --quick)")
flags.DEFINE_string("first_fit_of", None, "MODEL:SIDE (private or non-private): time that side's first fit "
                    "alone in this process, print it and exit (what the rounds' processes start)")

README_BATCH, README_EPOCHS = 64, 10  # the README's make_private example
SIDES = ("private", "non-private")
FIRST_FIT = "FIRST_FIT_SECONDS"


def side_run(name: str, side: str, s: dict, b: int, steps: int, keras=tf_keras) -> Callable[[], int]:
    """A `side` ("private" or "non-private") of model `name`, built and compiled: fit once, return the
    examples seen. The README MLP fits its digits for 10 epochs at B = 64 (the README's example), the
    others one epoch over N = B * steps examples."""
    epochs = README_EPOCHS if name == "readme_mlp" else 1
    b = README_BATCH if name == "readme_mlp" else b
    x, y = data(name, b * steps, s)
    n = len(x)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras.utils.set_random_seed(0)
    if side == "private":
        private = tfpriv.make_private(MODELS[name](keras, s), loss,
                                      tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                      num_examples=n, batch_size=b, delta=1e-5)
        private.compile(optimizer="adam")

        def run_private() -> int:
            private.fit(x, y, epochs=epochs, verbose=0)
            return n * epochs  # N/B Poisson batches an epoch: N examples in expectation
        return run_private
    plain = MODELS[name](keras, s)
    plain.compile(optimizer="adam", loss=loss)

    def run_plain() -> int:  # the pipeline made at every `fit`, as Keras makes its own of arrays and tfpriv its own
        plain.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(b).with_options(pipeline_options()),
                  epochs=epochs, verbose=0)
        return n * epochs
    return run_plain


def fits(name: str, s: dict, b: int, steps: int, keras=tf_keras) -> tuple[dict, dict]:
    """({"private": fit once, "non-private": fit once}, seconds of each side's first, untimed fit in
    this process, the private side first)."""
    runs = {side: side_run(name, side, s, b, steps, keras) for side in SIDES}
    first = {}
    for side, run in runs.items():
        start = time.perf_counter()
        run()
        first[side] = time.perf_counter() - start
    return runs, first


def first_fit_in_fresh_process(name: str, side: str) -> float:
    """Seconds of `side`'s first fit of model `name` in a new process of this script (same flags)."""
    flags_now = [f"--{f}={getattr(FLAGS, f)}" for f in ("batch_size", "first_fit_steps", "keras", "threads", "quick")]
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), f"--first_fit_of={name}:{side}", *flags_now],
                          capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(FIRST_FIT)]
    if proc.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"--first_fit_of={name}:{side} failed: {proc.stderr[-2000:]}")
    return float(lines[0].split()[1])


def main(argv):
    del argv
    s, b, steps, first_steps, rounds = SIZES, FLAGS.batch_size, FLAGS.steps, FLAGS.first_fit_steps, FLAGS.rounds
    if FLAGS.quick:
        s, b, steps, first_steps, rounds = QUICK_SIZES, 8, 1, 1, 1
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
    keras = tf_keras
    if FLAGS.keras == "3":
        import keras  # noqa: F811 (Keras 3 on TensorFlow's backend)
    if FLAGS.first_fit_of:
        name, side = FLAGS.first_fit_of.split(":")
        run = side_run(name, side, s, b, first_steps, keras)
        start = time.perf_counter()
        run()
        print(FIRST_FIT, time.perf_counter() - start, flush=True)
        return
    header = {"command": "python bench/make_private_models.py " + " ".join(sys.argv[1:]),
              "tensorflow": tf.__version__, "keras": keras.__version__, "cpus": os.cpu_count(), "threads": FLAGS.threads,
              "steps": steps, "first_fit_steps": first_steps, "sizes": s}
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    for name in FLAGS.only or list(MODELS):
        start = load_average()
        orders = [SIDES if k % 2 == 0 else SIDES[::-1] for k in range(1 if FLAGS.quick else FLAGS.first_fit_rounds)]
        first_rounds = [{side: first_fit_in_fresh_process(name, side) for side in order} for order in orders]
        first = {side: quantiles([r[side] for r in first_rounds])["median"] for side in SIDES}
        first_ratio = quantiles([r["private"] / r["non-private"] for r in first_rounds])["median"]
        runs, in_process = fits(name, s, b, steps, keras)
        rates = interleaved(runs, rounds)
        batch = README_BATCH if name == "readme_mlp" else b
        row = summary("tfpriv", name, rates["private"], rates["non-private"], **header, batch_size=batch,
                      first_fit_seconds=first, first_fit_ratio=first_ratio, first_fit_seconds_by_round=first_rounds,
                      first_fit_seconds_in_process=in_process,
                      load_average_start=start, load_average_end=load_average())
        print_row(row)
        with open(FLAGS.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    app.run(main)
