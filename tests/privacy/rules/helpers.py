"""Checks one rule on a one-layer model: its per-example norms and clipped sums equal the naive loop."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tests.privacy import reference as ref
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import LossTerms, TermSpec

SPEC = TermSpec(sample=("phi",))


def check_rule(layer: tf.keras.layers.Layer, x: np.ndarray, rule_name: str, clip: float = 0.5) -> None:
    """Asserts `layer` gets `rule_name` and that the engine's clipped sum equals the naive loop."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(x.shape[1:]), layer])

    def loss_fn(inputs, layout):
        out = model(inputs)
        return LossTerms({"phi": tf.reduce_sum(tf.reshape(tf.tanh(out), [tf.shape(out)[0], -1]) ** 2, axis=1)})

    x = tf.constant(x, tf.float32)
    for clipped_sum in ("bookkeeping", "reweight"):
        engine = DPGradientEngine(DPConfig(aggregation="micro", l2_norm_clip=clip, expected_batch_size=float(len(x)),
                                           clipped_sum=clipped_sum), model, SPEC)
        assert engine.recorder.rules[id(layer)].name == rule_name
        out = engine.clipped_sums(loss_fn, x)
        grads = ref.per_example_sample_grads(loss_fn, x, engine.variables)
        np.testing.assert_allclose(np.sqrt(out["sample_sq_norms"].numpy()), [np.linalg.norm(g) for g in grads],
                                   rtol=1e-4)
        want = np.sum([ref.clip(g, clip) for g in grads], axis=0)
        np.testing.assert_allclose(ref.flat(out["sample"]), want, rtol=1e-4, atol=1e-6)
