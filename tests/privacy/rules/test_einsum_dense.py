"""EinsumDenseRule: MultiHeadAttention's and Dense-like equations against the naive loop; other
equations are refused (fallback); MultiHeadAttention trains through its EinsumDense parts."""
import numpy as np
import pytest
import tensorflow as tf

from tests.privacy.rules.helpers import check_make_private, check_model, check_rule
from tfpriv.compat import keras
from tfpriv.privacy import rules
from tfpriv.privacy.rules.einsum_dense import split_equation

L = keras.layers


@pytest.mark.parametrize("equation,output_shape,bias_axes,shape", [
    ("ab,bc->ac", [3], "c", [5, 4]),
    ("abc,cd->abd", [None, 3], "d", [5, 2, 4]),
    ("abc,cde->abde", [None, 2, 3], "de", [5, 2, 4]),     # MultiHeadAttention's query/key/value
    ("abcd,cde->abe", [None, 3], "e", [5, 2, 2, 3]),      # its output projection
    ("abc,dce->abde", [None, 2, 3], "d", [5, 2, 4]),      # kernel letters not contracted-first; bias [d, 1]
    ("abc,cd->adb", [3, None], None, [5, 2, 4]),          # output positions after the free axis
], ids=["dense", "dense3", "qkv", "out", "permuted", "transposed-out"])
def test_einsum_dense(equation, output_shape, bias_axes, shape):
    x = np.random.default_rng(0).normal(size=shape)
    layer = L.EinsumDense(equation, output_shape=output_shape, bias_axes=bias_axes, activation="tanh")
    layer.build([None, *shape[1:]])
    if layer.bias is not None:
        layer.bias.assign(np.random.default_rng(1).normal(size=layer.bias.shape))
    check_rule(layer, x, "einsum_dense", batch_terms=True)


@pytest.mark.parametrize("equation", ["...b,bc->...c", "abc,bcd->abd", "abc,cd->ad", "abc,cd->bd", "ab,bc->abc"])
def test_other_equations_are_refused(equation):
    assert split_equation(equation) is None
    layer = L.EinsumDense(equation, output_shape=[3] if equation.endswith("c") else [2, 3])
    assert not rules.EinsumDenseRule().supports(layer)


def transformer_block(vocab: int, length: int, mask_zero: bool = False) -> tuple[keras.Model, dict[str, str]]:
    """Embedding -> self-attention (padding-masked if mask_zero) + residual -> LayerNorm -> pooled Dense,
    and the rule each layer must get."""
    keras.utils.set_random_seed(0)
    tokens = L.Input([length], dtype=tf.int32)
    h = L.Embedding(vocab, 8, mask_zero=mask_zero, name="emb")(tokens)
    attention = L.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    h = L.LayerNormalization(name="norm")(h + attention(h, h))
    out = L.Dense(2, name="out")(L.GlobalAveragePooling1D()(h))
    parts = {sub.name: "einsum_dense" for sub in (attention._query_dense, attention._key_dense,
                                                  attention._value_dense, attention._output_dense)}
    return keras.Model(tokens, out), {"emb": "embedding", "norm": "layer_normalization", "out": "dense", **parts}


@pytest.mark.parametrize("mask_zero", [False, True], ids=["unmasked", "padding-masked"])
def test_multi_head_attention_block_against_the_naive_loop(mask_zero):
    ids = np.random.default_rng(0).integers(1, 6, size=[5, 4])
    ids[1, 2:] = 0
    ids[3, 1:] = 0
    model, rule_names = transformer_block(6, 4, mask_zero)
    check_model(model, ids, rule_names, batch_terms=True)


def test_multi_head_attention_trains_through_its_einsum_dense_parts():
    ids = np.random.default_rng(0).integers(0, 12, size=[64, 5])
    labels = (ids[:, 0] > 5).astype(np.int32)
    model, rule_names = transformer_block(12, 5)
    check_make_private(model, ids, labels, rule_names)
