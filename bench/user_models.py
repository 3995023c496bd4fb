"""The Keras models of `make_private_models.py` (and `profile_step.py`), built in the Keras module given
(tf_keras or Keras 3), with their data: shapes from `model_sizes.py`, which `opacus_models.py` shares."""
from __future__ import annotations

import numpy as np

from tfpriv.data import load_dataset


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


def gru(keras, s: dict):
    """Embedding(vocab, width) -> GRU(width) -> Dense(2) on [length] token ids."""
    L = keras.layers
    return keras.Sequential([L.Input([s["length"]], dtype="int32"), L.Embedding(s["vocab"], s["width"]),
                             L.GRU(s["width"]), L.Dense(2)])


def readme_mlp(keras, s: dict):
    """The README's make_private model: Dense(32, relu) -> Dense(10) on 8x8 digits."""
    L = keras.layers
    return keras.Sequential([L.Input([64]), L.Dense(32, activation="relu"), L.Dense(10)])


MODELS = {"convnet": convnet, "lstm": lstm, "gru": gru, "transformer": transformer, "readme_mlp": readme_mlp}


def data(model: str, n: int, s: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if model == "readme_mlp":
        digits = load_dataset("digits")
        return digits.x_train.reshape(len(digits.x_train), -1), digits.labels_train["label"]
    if model == "convnet":
        return rng.random((n, s["image"], s["image"], 1), dtype=np.float32), rng.integers(0, 10, n)
    return rng.integers(0, s["vocab"], (n, s["length"])).astype(np.int32), rng.integers(0, 2, n)
