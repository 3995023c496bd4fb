"""The known-seed coupling: one noiseless step on D and D + {x} with the same seeded streams.

Someone who knows a run's seed can reproduce its loss stream (latents, interpolation weights,
reparameterisation noise, prior samples) and, through the noise stream, its partitions. Privacy
then needs the clipped sums to move by at most the declared sensitivity when x is added *with
every other example keeping the numbers the seed gives it*: no coupling can be chosen. This
audit runs one step as training does (`StreamGenerator.step`: the model's inputs and loss, the
partitions) on D and on D + {x}, x last (a record appended to the data set: the Poisson sampler's
draws of the others are unchanged too), both from the same seeded stream states, and reports the
largest whitened change divided by the declared sensitivity. Before the streams were keyed by
slot, one more example shifted every later draw (a GAN's interpolation weights came after
n x latent_size latents; the VAE's prior samples after its reparameterisation noise; examples
recomputed alone drew anew): ratios 1.18 (DP-WGAN-GP), 1.71 and 4.25 (VAE) were measured.
"""
from __future__ import annotations

import math
import time

import tensorflow as tf

from tfpriv.audit.sensitivity import SensitivityAuditor
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.rng import in_step, stream_generator


def _append(data, row):
    return tf.nest.map_structure(lambda t, r: tf.concat([t, tf.cast(r, t.dtype)], axis=0), data, row)


def known_seed_additions(data, scales=(1000.0,), extreme: float | None = 3e38) -> list[tuple[str, object]]:
    """(detail, one-row data) of the added records: copies of the first and last example, scaled
    copies, and (`extreme`) a finite record that overflows inside the model; integer entries kept."""
    n = int(tf.shape(tf.nest.flatten(data)[0])[0])
    out = []
    for s in sorted({0, n - 1}):
        row = tf.nest.map_structure(lambda t: t[s:s + 1], data)
        out.append((f"copy of example {s}", row))
        for k in scales:
            out.append((f"example {s} x{k:g}", tf.nest.map_structure(
                lambda t, k=k: t * k if t.dtype.is_floating else t, row)))
    if extreme is not None:
        out.append((f"every feature {extreme:g}", tf.nest.map_structure(
            lambda t: tf.fill(tf.shape(t[:1]), tf.cast(extreme, t.dtype)) if t.dtype.is_floating else t[:1], data)))
    return out


def known_seed_audit(model, config: DPConfig, data, seed: int = 0, additions=None) -> dict:
    """max over the additions of (whitened change of one noiseless step) / (declared sensitivity),
    with the loss and noise streams seeded by `seed` and reset to the same state for D and D + {x}.

    model: a built `DPModel` (its loss stream is replaced while the audit runs, then restored);
    data: one batch as `fit` would pass it; additions: (detail, one-row data), default
    `known_seed_additions(data)`.
    """
    start_time = time.time()
    data = tf.nest.map_structure(tf.convert_to_tensor, data)
    loss = stream_generator(seed, "loss")
    with model.dp_state.swapped(rng=loss):
        auditor = SensitivityAuditor(model, config, model.private_inputs(data), coupling="none", seed=seed)
        engine = auditor.engine
        engine.loss_rng = loss
        engine.generator = stream_generator(seed, "noise")
        states = [(g, g.state.read_value()) for g in (loss, engine.generator)]

        def step(batch):
            for g, state in states:
                g.state.assign(state)
            n = tf.shape(tf.nest.flatten(batch)[0])[0]
            with in_step(engine.generator):
                ids = engine.layout(n).partition_ids
            with in_step(loss):
                return auditor._blocks(model.private_inputs(batch), ids)

        base = step(data)
        changes = []
        for detail, row in (additions if additions is not None else known_seed_additions(data)):
            changes.append((float(auditor.whitened(step(_append(data, row)), base)), detail))
    finite = [c for c in changes if not math.isnan(c[0])]
    worst = max(finite) if len(finite) == len(changes) else next(c for c in changes if math.isnan(c[0]))
    return {
        "coupling": "known seed: the same seeded streams for D and D + {x}, x last",
        "declared_sensitivity": auditor.declared,
        "max_whitened_change": worst[0],
        "max_sensitivity_ratio": worst[0] / auditor.declared,
        "worst_neighbour": {"kind": "known_seed", "detail": worst[1]},
        "neighbours": len(changes),
        "seconds": round(time.time() - start_time, 2),
    }
