"""The sensitivity sweep: model x mode x divergence x partitioning, each audited by `audit_sensitivity`.

Models (tiny, deterministic from a seed):
  * PriVAE: `VAE` with MLP encoder/decoder (`build_architecture("mlp", ...)`, or smaller hidden
    widths), priors normal / sparse, divergences none / mmd / kl_pq;
  * DP-WGAN-GP critic: `make_dpwgan_gp` at a tiny capacity, micro (the only private GAN mode),
    clipping per_example (the gradient penalty is second order), optionally class-conditional;
  * `make_private` on a linear softmax classifier (DP-SGD on a per-example loss);
  * `make_private` on token classifiers: Embedding -> pooled Dense ("embedding"), a
    transformer block, Embedding -> self-attention + residual -> LayerNorm -> pooled Dense
    ("transformer"), Embedding -> LSTM -> Dense and Embedding -> GRU -> Dense ("lstm", "gru": the
    recurrent rules' ghost norms), and the Embedding inside a nested encoder model ("nested_embedding"), on the digits
    quantised to tokens (`TEXT_MODELS`);
  * `make_private` with a plain-function sparse loss on float labels ("float_label": a crafted
    label out of range is dropped, not a crash), and an Embedding -> batch-centring model
    ("embedding_mixing", `Case.verify`: the engine's verification must refuse it, as training does).
Modes: micro (with a batch-wise term: max_batch_size = B + 1, so every neighbour is below the cap;
and "micro_cap", max_batch_size = B, so an added example crosses the cap and the batch is
skipped), batch, termwise b = 2, 4 and singleton partitions (b = 0).
Clip norms are set to the median of the batch's unclipped norms (half the groups clipped), or
to the values given.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from tfpriv.audit.fixed_batches import audit_fixed_batches
from tfpriv.audit.known_seed import known_seed_audit
from tfpriv.audit.sensitivity import DEFAULT_SCALES, audit_sensitivity, passes
from tfpriv.compat import keras
from tfpriv.privacy.config import DPConfig
from tfpriv.errors import ConfigError
from tfpriv.privacy.engine import DPGradientEngine, public_batch
from tfpriv.privacy.rng import stream_generator
from tfpriv.privacy.terms import BatchLayout

PRIORS = ("normal", "sparse")
DIVERGENCES = ("none", "mmd", "kl_pq")
MODES = (("micro", None), ("batch", None), ("termwise", 2), ("termwise", 4), ("termwise", 0))


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration of the sweep."""

    model: str                 # "vae" | "dpwgan_gp" | "make_private" | one of TEXT_MODELS
    aggregation: str
    num_partitions: int | None = None
    prior: str | None = None
    divergence: str | None = None
    conditional: bool = False
    at_cap: bool = False       # micro with a batch-wise term: max_batch_size = B (else B + 1)
    prior_samples: int | None = None  # the divergence's prior draws per partition (None: |s_j|)
    clipping: str | None = None  # None: per_example for the GAN, fast otherwise
    known_seed: bool = False   # the known-seed coupling (`tfpriv.audit.known_seed`) instead of the audit's
    verify: bool = False       # verify on a public batch first, as training does; refused: trains on nothing
    fixed_batches: bool = False  # the "fixed" scheme's 2-Delta bound (`tfpriv.audit.fixed_batches`) instead
    per_example_chunk: int | None = None  # per_example clipping: examples clipped and summed at once

    @property
    def name(self) -> str:
        parts = [self.model]
        if self.model == "vae":
            parts += [self.prior, self.divergence + ("" if self.prior_samples is None else f"_m{self.prior_samples}")]
        if self.conditional:
            parts.append("conditional")
        mode = self.aggregation + ("_cap" if self.at_cap else "")
        if self.aggregation == "termwise":
            mode += "_b" + ("singleton" if self.num_partitions == 0 else str(self.num_partitions))
        extra = (([self.clipping] if self.clipping else []) + (["known_seed"] if self.known_seed else [])
                 + (["verified"] if self.verify else []) + (["fixed_batches"] if self.fixed_batches else [])
                 + ([f"chunks_of_{self.per_example_chunk}"] if self.per_example_chunk else []))
        return "/".join(parts + [mode] + extra)


def vae_cases(priors: Iterable[str] = PRIORS, divergences: Iterable[str] = DIVERGENCES,
              modes: Iterable[tuple[str, int | None]] = MODES) -> list[Case]:
    return [Case("vae", mode, b, prior, div) for prior in priors for div in divergences for mode, b in modes]


def default_cases() -> list[Case]:
    """The full sweep: every VAE prior x divergence x mode (micro at the batch cap too, for
    the divergences), the GAN critic (the conditional one in chunks of 3 examples) and make_private."""
    cap = [Case("vae", "micro", None, prior, div, at_cap=True) for prior in PRIORS for div in DIVERGENCES if div != "none"]
    critic = [Case("dpwgan_gp", "micro"), Case("dpwgan_gp", "micro", conditional=True, per_example_chunk=3)]
    return (vae_cases() + cap + critic + [Case("make_private", "micro")] + [Case(m, "micro") for m in TEXT_MODELS]
            + screening_cases() + known_seed_cases() + [Case("make_private", "micro", fixed_batches=True)])


def screening_cases() -> list[Case]:
    """Records the screening must see wherever they are consumed (issue 46): an Embedding in a nested
    model, float labels of a plain-function loss, a loss that mixes integer-input examples."""
    return [Case("nested_embedding", "micro"), Case("float_label", "micro"),
            Case("embedding_mixing", "micro", verify=True)]


def known_seed_cases() -> list[Case]:
    """The known-seed coupling: the GAN critic, the VAE with singleton partitions (prior samples
    after the reparameterisation noise) and with `vectorized` clipping (examples recomputed alone
    when one overflows)."""
    return [Case("dpwgan_gp", "micro", known_seed=True),
            Case("vae", "termwise", 0, "normal", "mmd", known_seed=True),
            Case("vae", "termwise", 2, "normal", "mmd", clipping="vectorized", known_seed=True)]


# -- controls: configurations that leak, which the audit must flag --------------------------------
@dataclasses.dataclass(frozen=True)
class DeclaredSensitivity(DPConfig):
    """A `DPConfig` whose accountant is told `declared` instead of the mode's true sensitivity.

    A deliberately wrong configuration, for positive controls: e.g. micro with a batch-wise
    term and noise set for C (declared 1 instead of 2*B_max - 1), or term-wise with
    multi-example partitions accounted as if each partition moved by C2 (declared sqrt(2)
    instead of sqrt(5), the term-wise paper's Lemma 2 under add-or-remove adjacency).
    """

    declared: float = 1.0

    def sensitivity(self, has_batch_terms: bool) -> float:
        return self.declared if self.private else math.inf


def with_declared_sensitivity(config: DPConfig, declared: float) -> DeclaredSensitivity:
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(DPConfig)}
    return DeclaredSensitivity(**fields, declared=float(declared))


# -- models and data ---------------------------------------------------------------------------
def digits_batch(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n images [n, 8, 8, 1] in [0, 1] of scikit-learn's bundled digits (no download), with labels."""
    from tfpriv.data import load_dataset
    data = load_dataset("digits")
    idx = np.random.default_rng(seed).choice(len(data.x_train), size=n, replace=False)
    return data.x_train[idx].astype(np.float32), np.asarray(data.labels_train["label"])[idx].astype(np.int32)


def build_vae(prior: str, divergence: str, input_shape: Sequence[int], latent_dim: int = 2,
              hidden: Sequence[int] | None = None, alpha: float = 10.0, seed: int = 0,
              prior_samples: int | None = None):
    """A tiny PriVAE; `hidden` None: `build_architecture("mlp")`'s default widths."""
    from tfpriv.privae.architectures import build_architecture, mlp_decoder, mlp_encoder
    from tfpriv.privae.divergences import make_divergence
    from tfpriv.privae.priors import make_prior
    from tfpriv.privae.vae import VAE
    keras.utils.set_random_seed(seed)
    if hidden is None:
        encoder, decoder = build_architecture("mlp", input_shape, latent_dim)
    else:
        encoder = mlp_encoder(input_shape, latent_dim, hidden=tuple(hidden))
        decoder = mlp_decoder(latent_dim, input_shape, hidden=tuple(hidden)[::-1])
    reg = make_divergence(divergence, prior_samples=prior_samples)
    return VAE(encoder, decoder, prior=make_prior(prior, latent_dim), alpha=alpha if reg else 0.0, regularizer=reg)


def build_gan(capacity: int = 1, latent_size: int = 8, conditional: bool = False, seed: int = 0):
    from tfpriv.gan.wgan_gp import make_dpwgan_gp
    keras.utils.set_random_seed(seed)
    return make_dpwgan_gp(capacity=capacity, latent_size=latent_size, num_classes=10 if conditional else None,
                          seed=seed)


def build_classifier(input_dim: int, num_classes: int, seed: int = 0, clip: float = 1.0, batch_size: int = 8,
                     plain_loss: bool = False):
    """`make_private` on a linear softmax classifier (the PrivateModel it returns); `plain_loss`: the
    sparse loss as a plain function (its float labels are found to be indices by probing it)."""
    from tfpriv.training.private_model import make_private
    keras.utils.set_random_seed(seed)
    keras_model = keras.Sequential([keras.Input([input_dim]), keras.layers.Dense(num_classes)])
    if plain_loss:
        def loss(y, logits):
            return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    return make_private(keras_model, loss, DPConfig(aggregation="micro", l2_norm_clip=clip, noise_multiplier=1.0),
                               num_examples=1000, batch_size=batch_size)


# -- token classifiers (the Embedding, EinsumDense/MultiHeadAttention, LayerNormalization, LSTM and GRU
# rules) --
TEXT_MODELS = ("embedding", "transformer", "lstm", "gru", "nested_embedding")
RECURRENT = {"lstm": "LSTM", "gru": "GRU"}  # text model -> its Keras layer
MIXING = "embedding_mixing"  # Embedding -> t - mean over the batch -> Dense: verification must refuse it
VOCAB = 10  # = the digits' classes, so the audit's flipped examples ((id + 1) mod 10) stay in the vocabulary


def digit_tokens(images: np.ndarray, length: int = 16) -> np.ndarray:
    """[n, 8, 8, 1] images in [0, 1] -> [n, length] token ids in [0, VOCAB): every 64/length-th pixel, quantised."""
    flat = images.reshape(len(images), -1)[:, ::64 // length]
    return np.minimum((flat * VOCAB).astype(np.int32), VOCAB - 1)


def build_text_classifier(kind: str, length: int, num_classes: int, seed: int = 0, clip: float = 1.0,
                          batch_size: int = 8):
    """`make_private` on a token classifier of `kind` in TEXT_MODELS or MIXING (the PrivateModel it returns)."""
    from tfpriv.training.private_model import make_private
    L = keras.layers
    keras.utils.set_random_seed(seed)
    tokens = L.Input([length], dtype=tf.int32)
    if kind == "nested_embedding":  # a "pretrained encoder" sub-model holding the Embedding
        h = keras.Sequential([L.Embedding(VOCAB, 8), L.GlobalAveragePooling1D()], name="encoder")(tokens)
    else:
        h = L.Embedding(VOCAB, 8)(tokens)
    if kind == MIXING:
        h = L.Flatten()(L.Lambda(lambda t: t - tf.reduce_mean(t, axis=0, keepdims=True))(h))
    elif kind in RECURRENT:
        h = getattr(L, RECURRENT[kind])(8)(h)
    else:
        if kind == "transformer":
            h = L.LayerNormalization()(h + L.MultiHeadAttention(num_heads=2, key_dim=4)(h, h))
        if kind != "nested_embedding":
            h = L.GlobalAveragePooling1D()(h)
    keras_model = keras.Model(tokens, L.Dense(num_classes)(h))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    config = DPConfig(aggregation="micro", l2_norm_clip=clip, noise_multiplier=1.0)
    return make_private(keras_model, loss, config, num_examples=1000, batch_size=batch_size)


def median_clips(model, config: DPConfig, inputs, seed: int = 0) -> DPConfig:
    """`config` with its clip norms set to the median unclipped norm of the batch's groups
    (partitions drawn from the seeded noise stream, the loss's randomness from `model.rng`)."""
    n = int(tf.shape(tf.nest.flatten(inputs)[0])[0])
    big = config.replace(l2_norm_clip=1e30, batch_clip=1e30 if config.aggregation == "termwise" else config.batch_clip,
                         noise_multiplier=0.0, expected_batch_size=float(n), seed=seed)
    engine = DPGradientEngine(big, model.private_root(), model.term_spec(), variables=model.private_variables())
    if config.aggregation == "batch":
        grads, _ = engine.gradients(model.loss_fn, inputs)
        return config.replace(l2_norm_clip=float(tf.linalg.global_norm(grads)) / 2)
    layout = engine.layout(tf.constant(n))
    out = engine.clipped_sums(model.loss_fn, inputs, layout)
    if config.aggregation == "micro":
        sq = out.get("micro_sq_norms", out["sample_sq_norms"])
        return config.replace(l2_norm_clip=float(np.median(np.sqrt(sq.numpy()))))
    changes = {"l2_norm_clip": float(np.median(np.sqrt(out["sample_sq_norms"].numpy())))}
    if "partition_sq_norms" in out:
        norms = np.sqrt(out["partition_sq_norms"].numpy())
        counts = out["layout"].counts.numpy()
        changes["batch_clip"] = float(np.median(norms[counts > 0]))
    return config.replace(**changes)


def case_setup(case: Case, batch_size: int = 8, seed: int = 0, vae_hidden: Sequence[int] | None = None):
    """(model, config, data batch, audit kwargs) for one case."""
    images, labels = digits_batch(batch_size, seed)
    if case.model == "vae":
        model = build_vae(case.prior, case.divergence, images.shape[1:], hidden=vae_hidden, seed=seed,
                          prior_samples=case.prior_samples)
        x, kwargs = images, {}
    elif case.model == "dpwgan_gp":
        model = build_gan(conditional=case.conditional, seed=seed)
        padded = tf.image.resize(images, (28, 28)).numpy()  # the GAN's 28x28 architecture
        x = (padded, labels) if case.conditional else (padded,)
        kwargs = model.audit_options()
    elif case.model == "make_private":
        model = build_classifier(int(np.prod(images.shape[1:])), 10, seed=seed, batch_size=batch_size)
        x, kwargs = (images.reshape(batch_size, -1), labels), {"num_classes": 10}
    elif case.model == "float_label":
        model = build_classifier(int(np.prod(images.shape[1:])), 10, seed=seed, batch_size=batch_size,
                                 plain_loss=True)
        x, kwargs = (images.reshape(batch_size, -1), labels.astype(np.float32)), {}
    elif case.model in (*TEXT_MODELS, MIXING):
        tokens = digit_tokens(images)
        model = build_text_classifier(case.model, tokens.shape[1], 10, seed=seed, batch_size=batch_size)
        # A recurrent rule's tf.scan runs step by step in eager mode: its sums are evaluated in one
        # tf.function (the loss draws no random numbers).
        x, kwargs = (tokens, labels), {"num_classes": VOCAB, "graph": case.model in RECURRENT}
    else:
        raise ValueError(f"case.model: unknown model {case.model!r}")
    # Reproducible loss randomness (a GAN's fakes, the VAE's draws while the clips are set).
    model.dp_state.rng = stream_generator(seed, "loss")
    config = DPConfig(aggregation=case.aggregation, l2_norm_clip=1.0, batch_clip=1.0,
                      num_partitions=case.num_partitions if case.aggregation == "termwise" else 1,
                      clipping=case.clipping or ("per_example" if case.model == "dpwgan_gp" else "fast"),
                      expected_batch_size=float(batch_size), per_example_chunk=case.per_example_chunk, verify=False)
    has_batch = model.term_spec().has_batch_terms
    if case.aggregation == "micro" and has_batch:
        # B + 1: D' = D + {x} is below the cap; at_cap: D' crosses it and is skipped (noise only)
        config = config.replace(max_batch_size=batch_size if case.at_cap else batch_size + 1)
    return model, config, x, kwargs


def run_case(case: Case, batch_size: int = 8, seed: int = 0, vae_hidden: Sequence[int] | None = None,
             clips: dict | None = None, config_override=None, **audit_kwargs) -> dict:
    """Builds the case's model, sets clip norms (median, or `clips`) and audits it."""
    model, config, x, kwargs = case_setup(case, batch_size, seed, vae_hidden)
    data = tf.nest.map_structure(tf.convert_to_tensor, x)
    inputs = model.private_inputs(data)
    model.loss_terms(inputs, BatchLayout.single(batch_size), training=False)  # builds variables
    config = config.replace(**clips) if clips else median_clips(model, config, inputs, seed)
    if config_override is not None:
        config = config_override(config)
    if case.verify:
        refused = _refusal(model, config, data)
        if refused is not None:  # training would not start: nothing is released
            return {"case": case.name, **dataclasses.asdict(case), "refused": refused, "max_sensitivity_ratio": 0.0,
                    "worst_neighbour": {"kind": "refused", "detail": refused}, "seconds": 0.0, "passed": True}
    if case.known_seed:
        result = known_seed_audit(model, config, x, seed=seed)
        return {"case": case.name, **dataclasses.asdict(case), **result, "passed": passes(result)}
    if case.fixed_batches:  # a record inserted into positionally batched rows: 2 batches of B / 2
        result = audit_fixed_batches(model, config, x, max(1, batch_size // 2), positions=(0, batch_size // 2),
                                     seed=seed)
        return {"case": case.name, **dataclasses.asdict(case), **result, "passed": passes(result)}
    result = audit_sensitivity(model, config, None, inputs=inputs, seed=seed, **{**kwargs, **audit_kwargs})
    return {"case": case.name, **dataclasses.asdict(case), **result, "passed": passes(result)}


def _refusal(model, config: DPConfig, data) -> str | None:
    """The engine's verification on a public batch shaped like `data` (as `DPModel.prepare` runs it):
    its refusal, or None."""
    engine = DPGradientEngine(config.replace(verify=True), model.private_root(), model.term_spec(),
                              variables=model.private_variables(), loss_rng=model.rng)
    try:
        engine.verify(model.loss_fn, model.private_inputs(public_batch(data)))
    except ConfigError as err:
        return str(err)
    return None


def sweep(cases: Sequence[Case] | None = None, batch_size: int = 8, seed: int = 0,
          vae_hidden: Sequence[int] | None = None, scales: Sequence[float] = DEFAULT_SCALES,
          ascent_steps: int = 5, ascent_starts: int = 2, coupling: str = "example", nonfinite: bool = False,
          log=print) -> dict:
    """Audits every case; returns {"cases": [...], "max_sensitivity_ratio": max over cases, ...}."""
    cases = list(cases if cases is not None else default_cases())
    start = time.time()
    results = []
    for case in cases:
        r = run_case(case, batch_size, seed, vae_hidden, scales=scales, ascent_steps=ascent_steps,
                     ascent_starts=ascent_starts, coupling=coupling, nonfinite=nonfinite)
        results.append(r)
        if log:
            log(f"{case.name:40s} ratio {r['max_sensitivity_ratio']:.6f}  worst: {r['worst_neighbour']['kind']} "
                f"({r['worst_neighbour']['detail']})  {r['seconds']:.1f}s")
    ratios = [r["max_sensitivity_ratio"] for r in results]
    return {
        "max_sensitivity_ratio": max(ratios) if ratios and not any(math.isnan(v) for v in ratios) else math.nan,
        "passed": all(r["passed"] for r in results),
        "coupling": coupling,
        "batch_size": batch_size,
        "seed": seed,
        "cases": results,
        "seconds": round(time.time() - start, 1),
    }
