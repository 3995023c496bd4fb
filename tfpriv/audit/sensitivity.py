"""Sensitivity audit: the largest whitened change of the clipped sums between a batch and a neighbour.

For a configured model and aggregation mode, the audit evaluates the engine's un-noised clipped
sums (`DPGradientEngine.clipped_sums`; `batch` mode: the engine's own clipped group gradient)
on a batch D and on neighbours D' under add-or-remove-one adjacency:

  * every example removed (D \\ {x_r} against D, x_r put back last in its own partition);
  * crafted examples added: copies, scaled copies (x10 ... x1000, negated), random inputs, zeros,
    flipped labels and ids or labels out of range (integer inputs), optionally non-finite values;
    each added into every partition (partitions already holding others, and empty ones), or its own partition when
    partitions are singletons;
  * "optimised" examples: a few steps of normalised gradient ascent on the added example's
    (adversary-controlled) inputs, maximising the whitened change, started from the worst
    crafted ones.

The whitened change is the L2 change after dividing each noised block by its own clip norm
(docs/privacy.md): termwise sqrt((|d sample|/C1)^2 + (|d batch|/C2)^2), micro and batch |d|/C.
`max_sensitivity_ratio` is its maximum over all neighbours divided by the sensitivity the
accountant uses (`config.sensitivity(spec.has_batch_terms)`); a ratio > 1 means the noise is
calibrated for less than the mechanism can move, i.e. the printed epsilon does not hold.

What is held fixed between D and D' (see `tfpriv.audit.coupling`): the partition of every
existing example (the added example's partition is enumerated: worst case over the random
assignment), each existing example's randomness inside the loss (reparameterisation noise),
and the prior samples of every partition the added example does not join (the MMD's and
KL(p||q)'s prior samples are keyed by (partition, slot)). That is a coupling of the mechanism's
randomness; the bound on the change under a coupling bounds the privacy loss (the same
Gaussian mechanism for every fixed value of the coupled randomness, then a mixture). Per-example
inputs a model draws outside its loss (a GAN's fakes and interpolation weights) are rows of the
engine's inputs and stay with their example.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import numpy as np
import tensorflow as tf

from tfpriv.audit.coupling import CoupledRandomness
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import SINGLETON_PARTITIONS, DPConfig
from tfpriv.privacy.engine import DPGradientEngine
from tfpriv.privacy.terms import BatchLayout

TOLERANCE = 1e-4  # float32 round-off in sums of clipped gradients
DEFAULT_SCALES = (10.0, 1000.0)


@dataclasses.dataclass
class Neighbour:
    kind: str          # remove | copy | scaled | random | zeros | flipped | out_of_range | nonfinite | optimised
    detail: str
    partition: int | None
    whitened_change: float


def _flat(grads) -> tf.Tensor:
    if not grads:
        return tf.zeros([0])
    return tf.concat([tf.reshape(tf.convert_to_tensor(g), [-1]) for g in grads], axis=0)


def _rows(inputs, idx):
    idx = tf.constant(np.asarray(idx, np.int32).reshape([-1]))
    return tf.nest.map_structure(lambda t: tf.gather(t, idx), inputs)


def _append(inputs, row):
    return tf.nest.map_structure(lambda t, r: tf.concat([t, tf.cast(r, t.dtype)], axis=0), inputs, row)


def _batch_size(inputs) -> int:
    return int(tf.shape(tf.nest.flatten(inputs)[0])[0])


def _adversary_mask(inputs, adversary_keys: Sequence[str] | None) -> list[bool]:
    """Which flattened input leaves the adversary chooses for an added example (dict keys; else all)."""
    if adversary_keys is None or not isinstance(inputs, dict):
        return [True] * len(tf.nest.flatten(inputs))
    keys = sorted(inputs)  # tf.nest flattens dicts in sorted key order
    return [k in adversary_keys for k in keys]


class SensitivityAuditor:
    """Evaluates clipped sums of one model and configuration on batches and their neighbours."""

    def __init__(self, model, config: DPConfig, inputs, partition_ids: np.ndarray | None = None,
                 coupling: str = "example", seed: int = 0, adversary_keys: Sequence[str] | None = None,
                 num_classes: int | None = None, graph: bool = False):
        if not config.private:
            raise ConfigError("audit: aggregation='none' has no sensitivity to audit (epsilon is infinite)")
        self.model = model
        self.spec = model.term_spec()
        n = _batch_size(inputs)
        if config.expected_batch_size is None:
            config = config.replace(expected_batch_size=float(n))
        self.declared = float(config.sensitivity(self.spec.has_batch_terms))  # what the accountant uses
        self.config = config.replace(noise_multiplier=0.0)                    # sums before noise
        self.engine = DPGradientEngine(self.config, model.private_root(), self.spec,
                                       variables=model.private_variables())
        self.inputs = inputs
        self.n = n
        self.coupling = CoupledRandomness(model, seed=seed, mode=coupling, max_batch=max(256, 2 * n + 2))
        self.rng = np.random.default_rng(seed)
        self.adversary = _adversary_mask(inputs, adversary_keys)
        self.num_classes = num_classes
        # graph=True: evaluate the sums in one tf.function (traced once per batch size); only for
        # losses that draw no random numbers (the coupled generators work on concrete shapes).
        self.graph = graph
        self._graph_blocks = tf.function(self._blocks)
        cfg = self.config
        self.singleton = cfg.aggregation == "termwise" and cfg.num_partitions == SINGLETON_PARTITIONS
        self.num_partitions = cfg.partitions_for_batch_terms if cfg.aggregation == "termwise" else 1
        if partition_ids is None:
            if self.singleton:
                partition_ids = np.arange(n)
            elif self.num_partitions > 1:
                partition_ids = self.rng.integers(0, self.num_partitions, size=n)
            else:
                partition_ids = np.zeros(n, np.int64)
        self.partition_ids = np.asarray(partition_ids, np.int64)
        self.evaluations = 0

    # -- the mechanism's blocks -------------------------------------------------------------------
    @property
    def block_scales(self) -> dict[str, float]:
        cfg = self.config
        if cfg.aggregation == "termwise":
            scales = {"sample": cfg.l2_norm_clip}
            if self.engine.batch_terms:
                scales["batch"] = cfg.batch_clip
            return scales
        return {"group": cfg.l2_norm_clip}

    def layout(self, ids) -> BatchLayout:
        ids = tf.convert_to_tensor(np.asarray(ids, np.int32) if isinstance(ids, np.ndarray) else ids, tf.int32)
        if self.singleton:
            n = tf.shape(ids)[0]
            return BatchLayout(tf.range(n), n)
        return BatchLayout(ids, self.num_partitions)

    def blocks(self, inputs, ids: np.ndarray) -> dict[str, tf.Tensor]:
        """Un-noised, un-normalised clipped sums per noised block, flattened."""
        self.evaluations += 1
        self.coupling.begin(self.layout(ids))
        if self.graph:
            return self._graph_blocks(inputs, tf.constant(np.asarray(ids, np.int32)))
        return self._blocks(inputs, ids)

    def _blocks(self, inputs, ids) -> dict[str, tf.Tensor]:
        layout = self.layout(ids)
        cfg, loss_fn = self.config, self.model.loss_fn
        if cfg.aggregation == "batch":
            grads, _ = self.engine.gradients(loss_fn, inputs)  # the clipped group gradient, no noise
            return {"group": _flat(grads)}
        out = self.engine.clipped_sums(loss_fn, inputs, layout)
        if cfg.aggregation == "micro":
            total = _flat(out["sample"])
            if "batch" in out:  # sum_i w_i (grad phi_i + grad psi(batch))
                total = total + _flat(out["batch"])
            return {"group": total}
        if "batch" not in self.block_scales:
            return {"sample": _flat(out["sample"])}
        # The batch-wise noise is added only where psi reaches (docs/privacy.md); on the other
        # variables whatever psi sum the engine released would be noised with the sample-wise
        # block's noise, so it is audited as part of that block, in its units (x B/b).
        scale = cfg.expected_batch_size / cfg.batch_term_denominator
        reaches = out["psi_reaches"]
        sample = [s if r else s + scale * b for s, b, r in zip(out["sample"], out["batch"], reaches)]
        return {"sample": _flat(sample), "batch": _flat([b for b, r in zip(out["batch"], reaches) if r])}

    def whitened(self, a: dict[str, tf.Tensor], b: dict[str, tf.Tensor]) -> tf.Tensor:
        sq = [tf.reduce_sum(tf.square((a[k] - b[k]) / c)) for k, c in self.block_scales.items()]
        return tf.sqrt(tf.add_n(sq))

    # -- neighbours -------------------------------------------------------------------------------
    def _append_ids(self, ids: np.ndarray, partition: int) -> np.ndarray:
        return np.append(ids, len(ids) if self.singleton else partition)

    def _target_partitions(self) -> list[int]:
        if self.singleton:
            return [self.n]
        return list(range(self.num_partitions))

    def removals(self) -> list[Neighbour]:
        out = []
        for r in range(self.n):
            keep = [i for i in range(self.n) if i != r]
            ids = self.partition_ids[keep]
            smaller = _rows(self.inputs, keep)
            base = self.blocks(smaller, ids)
            with_r = self.blocks(_append(smaller, _rows(self.inputs, [r])), self._append_ids(ids, self.partition_ids[r]))
            out.append(Neighbour("remove", f"example {r}", int(self.partition_ids[r]),
                                 float(self.whitened(with_r, base))))
        return out

    def crafted(self, scales: Sequence[float] = DEFAULT_SCALES, nonfinite: bool = False) -> list[tuple[str, str, object]]:
        """(kind, detail, one-row inputs) of the crafted additions."""
        flat = tf.nest.flatten(self.inputs)
        sources = sorted({0, self.n - 1})
        out = []

        def make(kind, detail, fn_float, fn_int=None, source=0):
            leaves = []
            for leaf, adv in zip(flat, self.adversary):
                row = leaf[source:source + 1]
                if adv and leaf.dtype.is_floating and fn_float is not None:
                    row = tf.cast(fn_float(row), leaf.dtype)
                elif adv and leaf.dtype.is_integer and fn_int is not None:
                    row = tf.cast(fn_int(row), leaf.dtype)
                leaves.append(row)
            out.append((kind, detail, tf.nest.pack_sequence_as(self.inputs, leaves)))

        for s in sources:
            make("copy", f"duplicate of example {s}", lambda r: r, source=s)
            for k in scales:
                make("scaled", f"example {s} x{k:g}", lambda r, k=k: r * k, source=s)
                make("scaled", f"example {s} x{-k:g}", lambda r, k=k: -r * k, source=s)
        for k in (1.0, *scales):
            make("random", f"N(0, {k:g}^2)", lambda r, k=k: k * tf.constant(
                self.rng.normal(size=r.shape.as_list()), r.dtype))
        make("zeros", "all-zero inputs", tf.zeros_like)
        if any(leaf.dtype.is_integer and adv for leaf, adv in zip(flat, self.adversary)):
            ints = [leaf for leaf, adv in zip(flat, self.adversary) if leaf.dtype.is_integer and adv]
            k = self.num_classes or max(2, int(max(int(tf.reduce_max(t)) for t in ints)) + 1)
            for s in sources:
                make("flipped", f"example {s}, label + 1 mod {k}", lambda r: r, lambda y: (y + 1) % k, source=s)
                make("flipped", f"example {s} x{scales[-1]:g}, label + 1 mod {k}", lambda r: r * scales[-1],
                     lambda y: (y + 1) % k, source=s)
                # ids and labels out of range (= k, and -1) must be screened (dropped), not abort the step
                make("out_of_range", f"example {s}, every integer input = {k}", lambda r: r,
                     lambda y: tf.fill(tf.shape(y), k), source=s)
                make("out_of_range", f"example {s}, every integer input = -1", lambda r: r,
                     lambda y: -tf.ones_like(y), source=s)
        if nonfinite:
            make("nonfinite", "inf in every input", lambda r: r + np.inf)
            make("nonfinite", "nan in every input", lambda r: r + np.nan)
        return out

    def additions(self, candidates, base: dict[str, tf.Tensor]) -> list[Neighbour]:
        out = []
        for kind, detail, row in candidates:
            for p in self._target_partitions():
                ids = self._append_ids(self.partition_ids, p)
                change = float(self.whitened(self.blocks(_append(self.inputs, row), ids), base))
                holds = int(np.sum(self.partition_ids == p)) if not self.singleton else 0
                out.append(Neighbour(kind, f"{detail}; partition holds {holds} others", p, change))
        return out

    def optimised(self, start, partition: int, base: dict[str, tf.Tensor], steps: int = 5,
                  step_size: float = 0.5, label: str = "") -> Neighbour:
        """Normalised gradient ascent on the added example's adversary-controlled float inputs."""
        leaves = tf.nest.flatten(start)
        free = [i for i, (leaf, adv) in enumerate(zip(leaves, self.adversary)) if adv and leaf.dtype.is_floating]
        variables = {i: tf.Variable(tf.where(tf.math.is_finite(leaves[i]), leaves[i], 0.0)) for i in free}
        ids = self._append_ids(self.partition_ids, partition)
        best = -math.inf
        for t in range(steps + 1):
            with tf.GradientTape() as tape:
                row = tf.nest.pack_sequence_as(start, [variables[i] if i in variables else leaf
                                                       for i, leaf in enumerate(leaves)])
                change = self.whitened(self.blocks(_append(self.inputs, row), ids), base)
            value = float(change)
            best = max(best, value) if math.isfinite(value) else best
            if t == steps or not variables:
                break
            grads = tape.gradient(change, list(variables.values()))
            norm = math.sqrt(sum(float(tf.reduce_sum(tf.square(g))) for g in grads if g is not None))
            if not norm > 0 or not math.isfinite(norm):
                break
            size = math.sqrt(sum(float(tf.reduce_sum(tf.square(v))) for v in variables.values()))
            eta = step_size * max(size, 1.0) / (1.0 + t / 2.0)
            for v, g in zip(variables.values(), grads):
                if g is not None:
                    v.assign_add(eta * g / norm)
        return Neighbour("optimised", f"{steps} ascent steps from {label}", partition, best)


def audit_sensitivity(model, config: DPConfig, x, *, partition_ids: np.ndarray | None = None,
                      coupling: str = "example", scales: Sequence[float] = DEFAULT_SCALES,
                      ascent_steps: int = 5, ascent_starts: int = 2, nonfinite: bool = False,
                      adversary_keys: Sequence[str] | None = None, num_classes: int | None = None,
                      seed: int = 0, inputs=None, graph: bool = False) -> dict:
    """Audits the sensitivity of `model` trained under `config` on the batch `x`.

    Args:
      model: a `DPModel` (VAE, GAN, `make_private`'s model...), its variables built or buildable
        from `x`.
      config: the privatization; its `sensitivity()` is the declared value the accountant uses.
        `noise_multiplier` is ignored (sums are compared before noise); `expected_batch_size`
        defaults to the batch size; micro with a batch-wise term needs `max_batch_size`.
      x: one batch of training data as `fit` would pass it (the engine's inputs are
        `model.private_inputs(x)`, drawn once: a GAN's fakes stay with their example), or
        `inputs=` the engine's inputs directly.
      partition_ids: the partition of each example (termwise b >= 1); random by default.
      coupling: "example" (the coupling of `tfpriv.audit.coupling`), "stream" (the naive reset
        of the model's generator) or "none".
      scales: magnitudes of the crafted large-norm additions.
      ascent_steps, ascent_starts: gradient-ascent steps and how many of the worst crafted
        additions they start from (0 disables the optimised neighbours).
      nonfinite: also add examples holding inf / NaN (the engine must drop them).
      adversary_keys: for dict inputs, the entries an added example's owner controls (default all).
      num_classes: for integer label inputs (flipped labels); inferred from the batch otherwise.
      graph: evaluate the clipped sums in a tf.function (faster for per_example clipping; only for
        losses that draw no random numbers, e.g. the GAN critic, whose randomness is per-example
        inputs).

    Returns a dict with `max_sensitivity_ratio` (max whitened change / declared sensitivity),
    `max_whitened_change`, `declared_sensitivity`, the worst neighbour, the maximum ratio per
    neighbour kind and the settings.
    """
    start_time = time.time()
    if inputs is None:
        data = tf.nest.map_structure(tf.convert_to_tensor, x)
        inputs = model.private_inputs(data)
        n = _batch_size(inputs)
        model.loss_terms(inputs, BatchLayout.single(n), training=False)  # builds variables
    auditor = SensitivityAuditor(model, config, inputs, partition_ids, coupling, seed, adversary_keys, num_classes,
                                 graph)
    with auditor.coupling.installed():
        neighbours = auditor.removals()
        base = auditor.blocks(auditor.inputs, auditor.partition_ids)
        candidates = auditor.crafted(scales, nonfinite)
        added = auditor.additions(candidates, base)
        neighbours += added
        if ascent_steps > 0 and ascent_starts > 0:
            rows = {detail: row for _, detail, row in candidates}
            finite = [nb for nb in added if nb.kind != "nonfinite" and math.isfinite(nb.whitened_change)]
            starts = sorted(finite, key=lambda nb: -nb.whitened_change)[:ascent_starts]
            for nb in starts:
                detail = nb.detail.split(";")[0]
                neighbours.append(auditor.optimised(rows[detail], nb.partition, base, ascent_steps,
                                                    label=f"{detail} (partition {nb.partition})"))
    changes = np.array([nb.whitened_change for nb in neighbours], np.float64)
    if np.any(np.isnan(changes)):
        worst = neighbours[int(np.flatnonzero(np.isnan(changes))[0])]
        max_change = math.nan
    else:
        worst = neighbours[int(np.argmax(changes))]
        max_change = float(np.max(changes))
    by_kind: dict[str, float] = {}
    for nb in neighbours:
        ratio = nb.whitened_change / auditor.declared
        by_kind[nb.kind] = ratio if math.isnan(ratio) else max(by_kind.get(nb.kind, -math.inf), ratio)
    cfg = auditor.config
    return {
        "aggregation": cfg.aggregation,
        "num_partitions": cfg.num_partitions if cfg.aggregation == "termwise" else None,
        "batch_terms": bool(auditor.engine.batch_terms),
        "l2_norm_clip": cfg.l2_norm_clip,
        "batch_clip": cfg.batch_clip if cfg.aggregation == "termwise" else None,
        "max_batch_size": cfg.max_batch_size,
        "clipping": cfg.clipping,
        "batch_size": auditor.n,
        "partition_sizes": np.bincount(auditor.partition_ids, minlength=max(auditor.num_partitions, 1)).tolist()
        if not auditor.singleton else [1] * auditor.n,
        "declared_sensitivity": auditor.declared,
        "max_whitened_change": max_change,
        "max_sensitivity_ratio": max_change / auditor.declared,
        "worst_neighbour": dataclasses.asdict(worst),
        "max_ratio_by_kind": by_kind,
        "neighbours": len(neighbours),
        "evaluations": auditor.evaluations,
        "coupling": auditor.coupling.describe(),
        "seconds": round(time.time() - start_time, 2),
    }


def passes(result: dict, tolerance: float = TOLERANCE) -> bool:
    """Whether an audit result is within the declared sensitivity (ratio <= 1 + tolerance)."""
    ratio = result["max_sensitivity_ratio"]
    return bool(math.isfinite(ratio) and ratio <= 1.0 + tolerance)
