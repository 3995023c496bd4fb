"""Naive references for the engine tests: per-example Python loops, no tricks; for the tuning tests,
dp_accounting's own event accounting of a job (the tuner computes it from RDP curves)."""
from __future__ import annotations

import dp_accounting
import numpy as np
import tensorflow as tf

from tfpriv.privacy.accounting import DEFAULT_ORDERS
from tfpriv.privacy.terms import BatchLayout, LossTerms


def flat(grads) -> np.ndarray:
    return np.concatenate([np.reshape(tf.convert_to_tensor(g).numpy(), [-1]) for g in grads])


def clip(vec: np.ndarray, c: float) -> np.ndarray:
    n = np.linalg.norm(vec)
    return vec * min(1.0, c / max(n, 1e-12))


def grad_of(loss_fn, x, variables, which: str) -> np.ndarray:
    """Gradient of the sum of one kind of term on the sub-batch x (one partition)."""
    with tf.GradientTape() as tape:
        terms: LossTerms = loss_fn(x, BatchLayout.single(tf.shape(x)[0]))
        value = tf.reduce_sum(terms.sample_total()) if which == "sample" else tf.reduce_sum(terms.batch_total(1))
    grads = tape.gradient(value, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return flat(grads)


def per_example_sample_grads(loss_fn, x, variables) -> list[np.ndarray]:
    return [grad_of(loss_fn, x[i:i + 1], variables, "sample") for i in range(x.shape[0])]


def per_partition_batch_grads(loss_fn, x, variables, partition_ids: np.ndarray, num_partitions: int) -> list[np.ndarray]:
    out = []
    for j in range(num_partitions):
        idx = np.flatnonzero(partition_ids == j)
        if len(idx) == 0:
            out.append(np.zeros(sum(int(np.prod(v.shape)) for v in variables), np.float32))
        else:
            out.append(grad_of(loss_fn, tf.gather(x, idx), variables, "batch"))
    return out


def repeat_and_select_epsilon(trial: dp_accounting.DpEvent, count, delta: float) -> float:
    """(epsilon at delta) of K ~ `count` (a TrialCount) runs of `trial`, only the best released."""
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(trial, count.mean, count.dp_shape))
    return float(accountant.get_epsilon(delta))


def composed_epsilon(trial: dp_accounting.DpEvent, trials: int, delta: float) -> float:
    """(epsilon at delta) of `trials` runs of `trial`, every one released."""
    accountant = dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))
    accountant.compose(dp_accounting.SelfComposedDpEvent(trial, int(trials)))
    return float(accountant.get_epsilon(delta))
