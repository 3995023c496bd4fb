"""EmbeddingRule: token ids repeated within an example, and several examples reading the same row,
against the naive loop, with sample-wise and batch-wise terms."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy import reference as ref
from tests.privacy.rules.helpers import SPEC, check_make_private, check_rule
from tfpriv.compat import keras
from tfpriv.privacy.clipping import _row_sparse_sq_norms
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import LossTerms


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
    check_rule(keras.layers.Embedding(vocab, 3), ids, "embedding", batch_terms=True)


def test_embedding_with_mask_zero():
    ids = np.array([[1, 2, 2, 0, 0], [3, 0, 0, 0, 0], [2, 2, 2, 2, 1], [1, 3, 0, 0, 0]])
    check_rule(keras.layers.Embedding(4, 3, mask_zero=True), ids, "embedding")


def test_make_private_trains_an_embedding_model_on_the_fast_path():
    L = keras.layers
    ids = np.random.default_rng(0).integers(0, 20, size=[64, 6])
    labels = (ids[:, 0] > 9).astype(np.int32)
    model = keras.Sequential([L.Input([6], dtype=tf.int32), L.Embedding(20, 4, name="emb"),
                                 L.GlobalAveragePooling1D(), L.Dense(2, name="out")])
    check_make_private(model, ids, labels, {"emb": "embedding", "out": "dense"})


@pytest.mark.parametrize("clipped_sum", ["bookkeeping", "reweight"])
def test_a_nan_example_is_dropped_and_leaves_the_others_rows_alone(clipped_sum):
    """Example 1's output gradient is NaN (its float input is): its norm is non-finite, it is dropped,
    and the clipped sum equals that of the batch without it, though it reads the same table rows."""
    L = keras.layers
    keras.utils.set_random_seed(0)
    ids_in, scale_in = L.Input([4], dtype=tf.int32), L.Input([4])
    embedding = L.Embedding(5, 3)
    h = embedding(ids_in) * scale_in[:, :, None]
    model = keras.Model([ids_in, scale_in], L.Dense(2)(L.Flatten()(h)))

    def loss_fn(inputs, layout):
        return LossTerms({"phi": tf.reduce_sum(tf.square(model(list(inputs))), axis=1)})

    ids = tf.constant([[1, 2, 2, 0], [2, 2, 1, 3], [4, 1, 1, 1]], tf.int32)
    scale = np.ones([3, 4], np.float32)
    scale[1, 2] = np.nan
    engine = DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=0.1, expected_batch_size=3.0,
                                       clipped_sum=clipped_sum), model, SPEC)
    assert engine.recorder.rules[id(embedding)].name == "embedding"
    out = engine.clipped_sums(loss_fn, (ids, tf.constant(scale)))
    keep = [0, 2]
    without = engine.clipped_sums(loss_fn, (tf.gather(ids, keep), tf.constant(scale[keep])))
    assert float(out["dropped"]) == 1.0
    np.testing.assert_allclose(ref.flat(out["sample"]), ref.flat(without["sample"]), rtol=1e-6)
    assert np.all(np.isfinite(ref.flat(out["sample"])))
