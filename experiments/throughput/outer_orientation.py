"""Issue 52: the batched per-group outer product sum_r u_r ⊗ v_r ([G, R, du] x [G, R, dv]) in both orientations.

TensorFlow's CPU batched matmul transposes one operand of every group first; `clipping._group_outer` lets it
transpose the factor with fewer columns. Times each orientation (median of 40 calls of a traced function,
3 alternated repetitions) at the shapes of the bench models' layers.

    python experiments/throughput/outer_orientation.py
"""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# (G, R, du, dv): the convnet's two convolutions (B = 256), a transformer Dense on 64 positions, the conv VAE's
# 49-position layers both ways, a critic convolution (chunk of 62), a Dense on 8 positions.
SHAPES = [(256, 36, 144, 32), (256, 169, 9, 16), (256, 64, 64, 64), (256, 64, 64, 256), (256, 64, 256, 64),
          (256, 49, 512, 64), (256, 49, 64, 512), (64, 196, 288, 64), (64, 8, 1152, 10)]


def median_ms(fn, calls: int = 40) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}")
    for g, r, du, dv in SHAPES:
        u, v = tf.random.normal([g, r, du]), tf.random.normal([g, r, dv])
        u_transposed = tf.function(lambda: tf.einsum("gri,grj->gij", u, v))
        v_transposed = tf.function(lambda: tf.einsum("grj,gri->gji", v, u))
        a, b = [], []
        for _ in range(3):
            a.append(median_ms(u_transposed))
            b.append(median_ms(v_transposed))
        print(f"G={g} R={r} du={du} dv={dv}: u transposed {np.median(a):.2f} ms, v transposed {np.median(b):.2f} ms")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
