"""Issue 52: what a `fit` call costs around its steps (why the side-by-side benches time 20-step epochs).

One process, both sides of `bench/make_private_models.py`'s convnet (B = 256) warmed, then 5 alternated fits
of 2 and of 20 steps per side: the median ms per fit, the ms per extra step (slope) and the set-up per call
(intercept). Then the pipelines each side builds per `fit` on arrays: tfpriv's Poisson dataset and its
iterator, Keras' data handler with its first iterator.

    python experiments/throughput/per_fit.py
"""
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from bench import make_private_models as bench  # noqa: E402
from bench.rounds import load_average  # noqa: E402
from outer_orientation import median_ms  # noqa: E402 (this folder's, run as a script)
from tfpriv.compat import keras  # noqa: E402
from tfpriv.data import sampling  # noqa: E402

B, LENGTHS, ROUNDS = 256, (2, 20), 5


def main() -> None:
    flags.FLAGS(["per_fit"])
    tf.config.threading.set_intra_op_parallelism_threads(2)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    print(f"load average {load_average()}")
    per_fit = {}
    for steps in LENGTHS:
        runs = {side: bench.side_run("convnet", side, bench.SIZES, B, steps) for side in bench.SIDES}
        for run in runs.values():
            run()
        times = {side: [] for side in runs}
        for _ in range(ROUNDS):
            for side, run in runs.items():
                start = time.perf_counter()
                run()
                times[side].append(time.perf_counter() - start)
        per_fit[steps] = {side: statistics.median(t) * 1000 for side, t in times.items()}
        print(f"fit of {steps} steps, ms:", {side: round(v, 1) for side, v in per_fit[steps].items()})
    short, long = LENGTHS
    for side in bench.SIDES:
        slope = (per_fit[long][side] - per_fit[short][side]) / (long - short)
        print(f"{side}: {slope:.1f} ms per extra step, {per_fit[short][side] - short * slope:.1f} ms set-up per fit")
    x = np.random.default_rng(0).random((2 * B, 28, 28, 1), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, 2 * B)
    dataset = sampling.make_dataset((x, y), B, "poisson", 0)[0]
    build = median_ms(lambda: sampling.make_dataset((x, y), B, "poisson", 0), calls=15)
    first_iterator = median_ms(lambda: iter(dataset), calls=15)
    print(f"tfpriv Poisson pipeline: build {build:.1f} ms, iterator {first_iterator:.1f} ms")
    from tf_keras.src.engine import data_adapter
    model = keras.Sequential([keras.Input([28, 28, 1]), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile("sgd", "mse")

    def keras_handler():
        handler = data_adapter.get_data_handler(x=x, y=y, batch_size=B, epochs=1, shuffle=False, model=model,
                                                steps_per_execution=model._steps_per_execution)
        next(iter(handler.enumerate_epochs()))
    print(f"Keras data handler and its first iterator: {median_ms(keras_handler, calls=15):.1f} ms")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
