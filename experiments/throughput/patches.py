"""Issue 52: image patches [R, H', W', 3*3*C] (a 3x3 stride-2 convolution's rows of U) five ways, beside the
convolution itself, at the convnet's two inputs, a CIFAR-shaped one and a 32-channel one (median ms of a traced
call, 30 calls, 3 alternated repetitions; each result summed inside the call). All five give identical patches.

    python experiments/throughput/patches.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from outer_orientation import median_ms  # noqa: E402 (this folder's, run as a script)

K, S = 3, 2


def one_hot_conv(x):  # tfpriv.privacy.rules.conv.patches up to 7 channels and depth 64
    depth = K * K * x.shape[-1]
    return tf.nn.conv2d(x, tf.reshape(tf.eye(depth), [K, K, x.shape[-1], depth]), strides=S, padding="VALID")


def extract(x):  # tfpriv.privacy.rules.conv.patches when the spatial shape is unknown
    return tf.image.extract_patches(x, sizes=[1, K, K, 1], strides=[1, S, S, 1], rates=[1, 1, 1, 1], padding="VALID")


def _out(x):
    return (x.shape[1] - K) // S + 1, (x.shape[2] - K) // S + 1


def gathered(x):  # tfpriv.privacy.rules.conv.patches beyond 7 channels: one gather of the windows' pixels
    (_, h, w, c), (ho, wo) = x.shape, _out(x)
    rows = np.arange(ho)[:, None, None, None] * S + np.arange(K)[None, None, :, None]
    cols = np.arange(wo)[None, :, None, None] * S + np.arange(K)[None, None, None, :]
    index = (rows * w + cols).reshape(-1).astype(np.int32)
    return tf.reshape(tf.gather(tf.reshape(x, [-1, h * w, c]), index, axis=1), [-1, ho, wo, K * K * c])


def strided_slices(x):
    ho, wo = _out(x)
    parts = [x[:, i:i + S * (ho - 1) + 1:S, j:j + S * (wo - 1) + 1:S] for i in range(K) for j in range(K)]
    return tf.reshape(tf.stack(parts, axis=-2), [-1, ho, wo, K * K * x.shape[-1]])


def separable_slices(x):  # rows, then columns
    ho, wo = _out(x)
    rows = tf.stack([x[:, i:i + S * (ho - 1) + 1:S] for i in range(K)], axis=2)
    cols = tf.stack([rows[:, :, :, j:j + S * (wo - 1) + 1:S] for j in range(K)], axis=4)
    return tf.reshape(tf.transpose(cols, [0, 1, 3, 2, 4, 5]), [-1, ho, wo, K * K * x.shape[-1]])


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}")
    for shape, filters in (([256, 28, 28, 1], 16), ([256, 13, 13, 16], 32), ([256, 32, 32, 3], 32), ([256, 14, 14, 32], 64)):
        x, w = tf.random.normal(shape), tf.random.normal([K, K, shape[-1], filters])
        ways = {"one-hot conv": one_hot_conv, "extract_patches": extract, "gather": gathered, "strided slices": strided_slices,
                "separable slices": separable_slices}
        reference = extract(x).numpy()
        assert all(np.array_equal(tf.function(f)(x).numpy(), reference) for f in ways.values())
        calls = {n: tf.function(lambda f=f: tf.reduce_sum(f(x))) for n, f in ways.items()}
        calls["the convolution"] = tf.function(lambda: tf.reduce_sum(tf.nn.conv2d(x, w, strides=S, padding="VALID")))
        times = {n: [] for n in calls}
        for _ in range(3):
            for n, call in calls.items():
                times[n].append(median_ms(call, calls=30))
        print(shape, ", ".join(f"{n} {np.median(t):.2f}" for n, t in times.items()))


if __name__ == "__main__":
    main()
