"""EmbeddingRule: token ids repeated within an example, and several examples reading the same row,
against the naive loop, with sample-wise and batch-wise terms."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy.rules.helpers import check_make_private, check_rule
from tfpriv.privacy.clipping import _row_sparse_sq_norms


def test_row_sparse_norms_sum_the_values_of_repeated_indices():
    ids = tf.constant([[2, 0, 2], [1, 1, 1]], tf.int64)
    values = tf.constant(np.random.default_rng(0).normal(size=[2, 3, 4]), tf.float32)
    got = _row_sparse_sq_norms(ids, values, 3).numpy()
    want = [np.sum((values[0, 0] + values[0, 2]) ** 2) + np.sum(values[0, 1] ** 2), np.sum(np.sum(values[1], 0) ** 2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("shape,vocab", [([6, 5], 4), ([6, 2, 3], 7), ([6, 1], 50)],
                         ids=["repeats", "rank3", "one-token"])
def test_embedding(shape, vocab):
    ids = np.random.default_rng(1).integers(0, vocab, size=shape)
    check_rule(tf.keras.layers.Embedding(vocab, 3), ids, "embedding", batch_terms=True)


def test_embedding_with_mask_zero():
    ids = np.array([[1, 2, 2, 0, 0], [3, 0, 0, 0, 0], [2, 2, 2, 2, 1], [1, 3, 0, 0, 0]])
    check_rule(tf.keras.layers.Embedding(4, 3, mask_zero=True), ids, "embedding")


def test_make_private_trains_an_embedding_model_on_the_fast_path():
    L = tf.keras.layers
    ids = np.random.default_rng(0).integers(0, 20, size=[64, 6])
    labels = (ids[:, 0] > 9).astype(np.int32)
    model = tf.keras.Sequential([L.Input([6], dtype=tf.int32), L.Embedding(20, 4, name="emb"),
                                 L.GlobalAveragePooling1D(), L.Dense(2, name="out")])
    check_make_private(model, ids, labels, {"emb": "embedding", "out": "dense"})
