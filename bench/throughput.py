"""Cost of private training steps against the same model's non-private step, measured in one process.

Every section builds one model per configuration (the first is the model's non-private step)
and times them round-robin: each round runs `--steps` train steps of every configuration on
the same fixed batch (B examples; a fixed batch so Poisson variation does not blur the
comparison), each step traced for any batch size as a private `fit` traces it. A row's ratio
is computed per round (non-private seconds / private seconds: throughput relative to
non-private, higher is better) and reported as the median and
interquartile range over `--rounds` rounds, so load that drifts during the run affects both
sides of each ratio alike. Each section records the 1-minute load average at its start and end.
The VAEs' termwise rows are compared with the non-private step whose batch term (MMD) sees the
same 16 partitions, the other rows with the one over the whole batch (as micro and batch use it).

Memory: the peak bytes held by TensorFlow's CPU allocator during one train step
(`tf.config.experimental.get_memory_info` after `reset_memory_stats`, minus what was held
before the step), i.e. the step's tensors; Python objects and the model's variables are not
counted. Reported per row as the ratio to the non-private step's peak. Only the BFC allocator keeps
these counts (TensorFlow's CPU default where oneDNN is on, e.g. Intel CPUs with AVX-512; elsewhere
`get_memory_info` fails), so the benchmark sets TF_CPU_ALLOCATOR_USE_BFC=1 unless the caller set it:
both sides of every ratio run on the same allocator.

Sections (`--only`):
  mlp_vae          784-512-256-(2x10) / 10-256-512-784, sparse prior, Cauchy-MMD batch term (b=16)
  conv_vae         tfpriv's 28x28 conv encoder/decoder (latent 50), same prior and batch term
  mlp_classifier   784-512-256-10: tfpriv micro, TF Privacy's DPSequential (fast clipping)
                   and DPKerasSGDOptimizer (one microbatch per example)
  conv_classifier  2 strided Conv2D + Dense: `tfpriv.make_private` and TF Privacy's
                   DPKerasSGDOptimizer (its DPSequential has no Conv2D rule)
                   (TF Privacy's rows need tensorflow-privacy, i.e. the legacy stack of
                   requirements-legacy.txt; elsewhere one line says they are skipped)
  wgan_critic      DP-WGAN-GP critic gradient (clipping="per_example", second-order loss) against
                   the non-private critic gradient (capacity 32, B from --gan_batch_size)

    python bench/throughput.py [--batch_size=256] [--steps=3] [--rounds=15] [--only=...] [--out=bench/results.json]
    python bench/throughput.py --scaling      # ratio vs batch size and width (bench/scaling.json, .png)
    python bench/throughput.py --quick        # CI smoke test: tiny sizes, structure only

Timings on a shared machine are noisy; compare the IQRs before reading a difference.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")  # memory counts on every CPU (docstring, Memory)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from tfpriv.compat import keras  # noqa: E402
from tfpriv.privae.architectures import build_architecture  # noqa: E402
from tfpriv.privae.divergences import CauchyMMD  # noqa: E402
from tfpriv.privae.priors import SparseMixture  # noqa: E402
from tfpriv.privae.vae import VAE  # noqa: E402
from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.privacy.terms import LossTerms, TermSpec  # noqa: E402
from tfpriv.training.dp_model import DPModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SECTIONS = ("mlp_vae", "conv_vae", "mlp_classifier", "conv_classifier", "wgan_critic")
flags.DEFINE_integer("batch_size", 256, "Batch size B.")
flags.DEFINE_integer("steps", 3, "Train steps per configuration per round.")
flags.DEFINE_integer("rounds", 15, "Round-robin rounds; ratios are reported as median and IQR over rounds.")
flags.DEFINE_integer("gan_batch_size", 64, "Batch size of the wgan_critic section.")
flags.DEFINE_integer("per_example_chunk", None, "wgan_critic: DPConfig.per_example_chunk of the private critic "
                     "(examples clipped and summed at once; default: automatic).", lower_bound=1)
flags.DEFINE_string("out", "", "Output JSON (default bench/results.json, or bench/scaling.json with --scaling).")
flags.DEFINE_string("only", "", f"Comma-separated sections: {', '.join(SECTIONS)}.")
flags.DEFINE_bool("scaling", False, "Ratio of the term-wise VAE step against batch size and width.")
flags.DEFINE_string("batch_sizes", "64,128,256,512,1024", "--scaling: batch sizes (at width x1).")
flags.DEFINE_string("widths", "1,2,4,8", "--scaling: width multipliers (at --batch_size).")
flags.DEFINE_bool("quick", False, "Smoke test: B=16, 1 step, 2 rounds, the MLP VAE only.")
FLAGS = flags.FLAGS

L = keras.layers
IMAGE = (28, 28, 1)


# -- timing ------------------------------------------------------------------------------------------
class Config:
    """One configuration of a section: a callable running one train step, warmed up (traced).

    reference: the configuration its ratio is taken against (default: the section's first).
    """

    def __init__(self, name: str, step: Callable[[], object], slow: bool = False, reference: str | None = None):
        self.name, self.step, self.slow, self.reference = name, step, slow, reference
        step()
        step()  # traced and warm

    def seconds_per_step(self, steps: int) -> float:
        steps = 1 if self.slow else steps
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        return (time.perf_counter() - start) / steps

    def peak_bytes(self) -> int:
        """Peak bytes the CPU allocator held during one step, beyond what it held before."""
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        self.step()
        return int(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)


def keras_step(model: keras.Model, data) -> Callable[[], object]:
    """One `train_step` of a compiled model on a fixed batch, through Keras's own train function,
    traced for any batch size as `fit` traces it (Poisson batches vary in size; Keras' last batch)."""
    unknown_size = lambda t: tf.compat.v1.placeholder_with_default(t, [None, *t.shape[1:]])  # noqa: E731
    ds = tf.data.Dataset.from_tensors(data).repeat().map(
        lambda *d: tf.nest.map_structure(unknown_size, d if len(d) > 1 else d[0]))
    private = {"sampling": "fixed"} if getattr(getattr(model, "dp_config", None), "private", False) else {}
    model.fit(ds, steps_per_epoch=1, epochs=1, verbose=0, **private)  # builds, prepares and traces
    iterator = iter(ds)
    return lambda: model.train_function(iterator)


def _quantiles(values) -> dict:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def record_speedups(section: dict, suffix: str, key: str) -> None:
    """For each row with a counterpart named row + `suffix` (the same step before a change, timed in
    the same rounds), stores and prints the per-round speed-up over it as `key` (median, IQR)."""
    rows = {r["config"]: r for r in section["rows"]}
    for r in section["rows"]:
        old = rows.get(r["config"] + suffix)
        if old:
            q1, med, q3 = np.percentile(np.array(old["seconds_per_round"]) / np.array(r["seconds_per_round"]), [25, 50, 75])
            r[key] = {"q1": q1, "median": med, "q3": q3}
            print(f"  {section['section']} {r['config']}: {med:.2f} [{q1:.2f}, {q3:.2f}] x the speed of{suffix}", flush=True)


def run_section(section: str, configs: list[Config], steps: int, rounds: int, extra: dict | None = None) -> dict:
    """Times `configs` round-robin; ratios are against each config's reference (default configs[0])."""
    load_start = os.getloadavg()[0]
    seconds = {c.name: [] for c in configs}
    for _ in range(rounds):
        for c in configs:
            seconds[c.name].append(c.seconds_per_step(steps))
    peaks = {c.name: c.peak_bytes() for c in configs}
    load_end = os.getloadavg()[0]
    rows = []
    for c in configs:
        reference = c.reference or configs[0].name
        s = np.array(seconds[c.name])
        ratio = _quantiles(np.array(seconds[reference]) / s)
        rows.append({"config": c.name, "reference": reference, "ratio": ratio, "seconds_per_step": _quantiles(s),
                     "examples_per_s_median": float(np.median(1.0 / s)) * (extra or {}).get("batch_size", 1),
                     "peak_bytes": peaks[c.name], "peak_memory_ratio": peaks[c.name] / max(peaks[reference], 1),
                     "seconds_per_round": [float(v) for v in s]})
        print(f"  {section:16s} {c.name:46s} ratio {ratio['median']:6.3f} [{ratio['q1']:.3f}, {ratio['q3']:.3f}]"
              f"  memory {rows[-1]['peak_memory_ratio']:5.2f}x", flush=True)
    print(f"  {section}: load average {load_start:.1f} -> {load_end:.1f}", flush=True)
    return {"section": section, **(extra or {}), "rounds": rounds, "steps_per_round": steps,
            "load_average_start": load_start, "load_average_end": load_end, "rows": rows}


# -- models ------------------------------------------------------------------------------------------
def _vae(kind: str, width: int, with_mmd: bool) -> VAE:
    keras.utils.set_random_seed(0)
    if kind == "mlp":
        latent = 10
        enc = keras.Sequential([keras.Input(IMAGE), L.Flatten(), L.Dense(512 * width, activation="relu"),
                                   L.Dense(256 * width, activation="relu"), L.Dense(2 * latent)])
        dec = keras.Sequential([keras.Input([latent]), L.Dense(256 * width, activation="relu"),
                                   L.Dense(512 * width, activation="relu"), L.Dense(784), L.Reshape(IMAGE)])
    elif width == 1:
        latent = 50
        enc, dec = build_architecture("conv", IMAGE, latent)
    else:
        latent = 50
        c1, c2, d = 32 * width, 64 * width, 256 * width
        enc = keras.Sequential([keras.Input(IMAGE), L.Conv2D(c1, 4, strides=2, padding="same", activation="relu"),
                                   L.Conv2D(c2, 4, strides=2, padding="same", activation="relu"), L.Flatten(),
                                   L.Dense(d, activation="relu"), L.Dense(2 * latent)])
        dec = keras.Sequential([keras.Input([latent]), L.Dense(d, activation="relu"),
                                   L.Dense(7 * 7 * c2, activation="relu"), L.Reshape([7, 7, c2]),
                                   L.Conv2DTranspose(c1, 4, strides=2, padding="same", activation="relu"),
                                   L.Conv2DTranspose(1, 4, strides=2, padding="same")])
    return VAE(enc, dec, prior=SparseMixture(latent), alpha=100.0 if with_mmd else 0.0,
               regularizer=CauchyMMD() if with_mmd else None)


# The non-private references: the batch term over the whole batch (micro, batch) or over the
# same 16 partitions as termwise, so a ratio measures privatization only, not the partitioning.
VAE_CONFIGS = {
    "none": None,
    "none (16 partitions)": dict(aggregation="none", num_partitions=16),
    "micro (no batch term)": dict(aggregation="micro"),
    "micro (+MMD, cross terms)": dict(aggregation="micro", max_batch_size="B"),
    "batch": dict(aggregation="batch"),
    "termwise": dict(aggregation="termwise", num_partitions=16),
    "termwise (reweight pass)": dict(aggregation="termwise", num_partitions=16, clipped_sum="reweight"),
}


def vae_config(kind: str, name: str, b: int, width: int = 1) -> Config:
    kw = VAE_CONFIGS[name]
    vae = _vae(kind, width, with_mmd=not name.startswith("micro (no"))
    dp = None
    if kw is not None and kw["aggregation"] == "none":
        dp = DPConfig(**kw)
    elif kw is not None:
        kw = {k: (b if v == "B" else v) for k, v in kw.items()}
        dp = DPConfig(l2_norm_clip=1.0, batch_clip=0.1, noise_multiplier=1.0, expected_batch_size=b, verify=False, **kw)
    vae.compile(optimizer=keras.optimizers.SGD(1e-3), dp=dp, num_examples=b if dp and dp.private else None)
    x = (np.random.default_rng(0).random([b, *IMAGE]) > 0.7).astype(np.float32)
    return Config(name, keras_step(vae, x), reference="none (16 partitions)" if name.startswith("termwise") else None)


def vae_section(kind: str, b: int, steps: int, rounds: int, names=tuple(VAE_CONFIGS)) -> dict:
    return run_section(f"{kind}_vae", [vae_config(kind, n, b) for n in names], steps, rounds, {"batch_size": b})


def _mlp():
    keras.utils.set_random_seed(0)
    return [L.Dense(512, activation="relu", input_shape=(784,)), L.Dense(256, activation="relu"), L.Dense(10)]


class _Classifier(DPModel):
    """The MLP classifier through tfpriv's engine (sample-wise cross-entropy)."""

    def __init__(self):
        super().__init__()
        self.net = keras.Sequential(_mlp())

    def term_spec(self):
        return TermSpec(sample=("ce",))

    def loss_terms(self, data, layout, training=True):
        x, y = data
        logits = self.net(x, training=training)
        return LossTerms({"ce": keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)})


def _keras(layers, optimizer, loss, data) -> Callable[[], object]:
    model = keras.Sequential(layers) if isinstance(layers, list) else layers
    model.compile(optimizer, loss)
    return keras_step(model, data)


def tf_privacy_missing() -> str | None:
    """Why TF Privacy's baselines cannot run here (one line), or None when they can."""
    if importlib.util.find_spec("tensorflow_privacy") is not None:
        return None
    return (f"TF Privacy baselines skipped: tensorflow-privacy is not installed (0.9.0, its last release, needs "
            f"TensorFlow 2.15 and Python 3.11: requirements-legacy.txt; this is TF {tf.__version__})")


def mlp_classifier_section(b: int, steps: int, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    data = (rng.random([b, 784]).astype(np.float32), rng.integers(0, 10, [b]).astype(np.int64))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    configs = [Config("none (Keras)", _keras(_mlp(), keras.optimizers.SGD(1e-3), xent, data))]
    ours = _Classifier()
    ours.compile(keras.optimizers.SGD(1e-3), dp=DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0,
                                                            expected_batch_size=b, verify=False), num_examples=b)
    configs.append(Config("tfpriv micro (ghost norms + book-keeping)", keras_step(ours, data)))
    if tf_privacy_missing():
        return run_section("mlp_classifier", configs, steps, rounds, {"batch_size": b})
    from tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry
    from tensorflow_privacy.privacy.keras_models.dp_keras_model import DPSequential
    from tensorflow_privacy.privacy.optimizers.dp_optimizer_keras import DPKerasSGDOptimizer

    fast = DPSequential(l2_norm_clip=1.0, noise_multiplier=1.0, layer_registry=layer_registry.make_default_layer_registry(),
                        layers=_mlp(), use_xla=False)
    configs.append(Config("TF Privacy DPSequential (fast clipping)", _keras(fast, keras.optimizers.SGD(1e-3), xent, data)))
    opt = DPKerasSGDOptimizer(l2_norm_clip=1.0, noise_multiplier=1.0, num_microbatches=b, learning_rate=1e-3)
    configs.append(Config(f"TF Privacy DPKerasSGDOptimizer ({b} microbatches)",
                          _keras(_mlp(), opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
                                 data), slow=True))
    return run_section("mlp_classifier", configs, steps, rounds, {"batch_size": b})


def _convnet() -> keras.Sequential:
    """The conv classifier: 2 strided Conv2D + Dense."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([L.Input(IMAGE), L.Conv2D(16, 5, strides=2, padding="same", activation="relu"),
                                L.Conv2D(32, 5, strides=2, padding="same", activation="relu"), L.Flatten(),
                                L.Dense(64, activation="relu"), L.Dense(10)])


def conv_classifier_section(b: int, steps: int, rounds: int) -> dict:
    import tfpriv

    rng = np.random.default_rng(0)
    data = (rng.random([b, *IMAGE], dtype=np.float32), rng.integers(0, 10, b).astype(np.int32))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    configs = [Config("none (Keras)", _keras(_convnet(), keras.optimizers.SGD(1e-3),
                                             keras.losses.SparseCategoricalCrossentropy(from_logits=True), data))]
    ours = tfpriv.make_private(_convnet(), loss=xent, config=DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                     noise_multiplier=1.0, verify=False),
                               num_examples=60000, batch_size=b)
    ours.compile(keras.optimizers.SGD(1e-3))
    configs.append(Config("tfpriv make_private (micro, ghost norms)", keras_step(ours, data)))
    if tf_privacy_missing():
        return run_section("conv_classifier", configs, steps, rounds, {"batch_size": b})
    from tensorflow_privacy import DPKerasSGDOptimizer

    opt = DPKerasSGDOptimizer(l2_norm_clip=1.0, noise_multiplier=1.0, num_microbatches=b, learning_rate=1e-3)
    configs.append(Config(f"TF Privacy DPKerasSGDOptimizer ({b} microbatches)", _keras(_convnet(), opt, xent, data),
                          slow=True))
    return run_section("conv_classifier", configs, steps, rounds, {"batch_size": b})


CRITIC_CONFIGS = {
    "none": dict(aggregation="none", num_partitions=1),
    "micro, clipping=per_example": dict(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=0.5, clipping="per_example",
                                        seed=0, verify=False),
}


def critic_config(name: str, b: int, label: str | None = None) -> Config:
    """The DP-WGAN-GP critic's gradient and update on a fixed batch of `b` (capacity 32, conditional)."""
    from tfpriv.gan.wgan_gp import dp_adam, make_dpwgan_gp

    rng = np.random.default_rng(0)
    batch = {"image": tf.constant(rng.random((b, *IMAGE), dtype=np.float32)),
             "label": tf.constant(rng.integers(0, 10, b).astype(np.int32))}
    kw = dict(CRITIC_CONFIGS[name])
    if kw["aggregation"] != "none":
        kw["expected_batch_size"] = float(b)
        kw["per_example_chunk"] = FLAGS.per_example_chunk
    model = make_dpwgan_gp(capacity=32, num_classes=10, seed=0)
    model.compile(dp_adam(4e-4), dp_adam(4e-4), DPConfig(**kw), num_examples=60000)
    model.prepare(batch)

    @tf.function(input_signature=[{k: tf.TensorSpec([None, *t.shape[1:]], t.dtype) for k, t in batch.items()}])
    def critic_step(data):  # traced for any batch size, as the GAN's training loop traces it
        grads, _ = model.engine.gradients(model.loss_fn, model.private_inputs(data))
        model.optimizer.apply_gradients(zip(grads, model.engine.variables))

    return Config(label or name, lambda: critic_step(batch))


def wgan_critic_section(b: int, steps: int, rounds: int) -> dict:
    """The critic's gradient and update (the generator step, the same in both, is left out)."""
    return run_section("wgan_critic", [critic_config(n, b) for n in CRITIC_CONFIGS], steps, rounds,
                       {"batch_size": b, "per_example_chunk": FLAGS.per_example_chunk})


# -- scaling -----------------------------------------------------------------------------------------
def scaling(batch_sizes: list[int], widths: list[int], b: int, steps: int, rounds: int) -> list[dict]:
    """Term-wise ratio of the MLP and conv VAEs against batch size (width x1) and width (batch `b`)."""
    out = []
    for kind in ("mlp", "conv"):
        for axis, values in (("batch_size", batch_sizes), ("width", widths)):
            for value in values:
                bb, w = (value, 1) if axis == "batch_size" else (b, value)
                configs = [vae_config(kind, n, bb, w) for n in ("none (16 partitions)", "termwise")]
                rec = run_section(f"{kind}_vae", configs, steps, rounds, {"batch_size": bb})
                out.append({"model": f"{kind}_vae", "axis": axis, "batch_size": bb, "width": w, **rec})
                del configs
                keras.backend.clear_session()
    return out


def plot_scaling(records: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, axis in zip(axes, ("batch_size", "width")):
        for model in ("mlp_vae", "conv_vae"):
            recs = [r for r in records if r["model"] == model and r["axis"] == axis]
            if not recs:
                continue
            xs = [r[axis] for r in recs]
            ratios = [r["rows"][1]["ratio"] for r in recs]
            med = np.array([q["median"] for q in ratios])
            err = np.array([[m - q["q1"] for m, q in zip(med, ratios)], [q["q3"] - m for m, q in zip(med, ratios)]])
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=f"{model} termwise")
        ax.axhline(0.8, color="grey", linestyle=":", label="target 0.8")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (width x1)" if axis == "batch_size" else "width multiplier (B fixed)")
        ax.set_ylabel("throughput ratio to non-private (median, IQR)")
        ax.set_ylim(bottom=0)
        ax.legend()
    loads = [r["load_average_start"] for r in records] + [r["load_average_end"] for r in records]
    fig.suptitle(f"Private term-wise VAE step vs non-private (2 CPU cores, load average {min(loads):.1f}-{max(loads):.1f})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# -- main --------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; else what `platform` knows): timings differ across CPUs."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def _header() -> dict:
    return {"cpus": os.cpu_count(), "cpu": _cpu_model(), "platform": platform.platform(), "tensorflow": tf.__version__,
            "command": "python bench/throughput.py " + " ".join(sys.argv[1:]),
            "memory": "peak bytes of TensorFlow's CPU allocator during one train step (get_memory_info), "
                      "beyond what it held before the step; TF_CPU_ALLOCATOR_USE_BFC="
                      + os.environ["TF_CPU_ALLOCATOR_USE_BFC"]}


def main(argv):
    del argv
    b, steps, rounds = FLAGS.batch_size, FLAGS.steps, FLAGS.rounds
    if FLAGS.quick:
        b, steps, rounds = 16, 1, 2
    print(f"tfpriv throughput, B={b}, {steps} steps x {rounds} rounds; {os.cpu_count()} CPUs, TF {tf.__version__}",
          flush=True)
    if FLAGS.scaling:
        sizes = [int(v) for v in FLAGS.batch_sizes.split(",") if v]
        widths = [int(v) for v in FLAGS.widths.split(",") if v]
        records = scaling(sizes, widths, b, steps, rounds)
        out = FLAGS.out or os.path.join(HERE, "scaling.json")
        with open(out, "w") as f:
            json.dump({**_header(), "records": records}, f, indent=1)
        plot_scaling(records, os.path.splitext(out)[0] + ".png")
        print(f"written to {out} and {os.path.splitext(out)[0]}.png")
        return
    sections = FLAGS.only.split(",") if FLAGS.only else list(SECTIONS)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise app.UsageError(f"--only: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if {"mlp_classifier", "conv_classifier"} & set(sections) and tf_privacy_missing():
        print(tf_privacy_missing(), flush=True)
    results = []
    if FLAGS.quick:
        results.append(vae_section("mlp", b, steps, rounds, names=("none (16 partitions)", "termwise")))
        sections = []
    for kind in ("mlp", "conv"):
        if f"{kind}_vae" in sections:
            results.append(vae_section(kind, b, steps, rounds))
    if "mlp_classifier" in sections:
        results.append(mlp_classifier_section(b, steps, rounds))
    if "conv_classifier" in sections:
        results.append(conv_classifier_section(b, steps, rounds))
    if "wgan_critic" in sections:
        results.append(wgan_critic_section(FLAGS.gan_batch_size, steps, rounds))
    out = FLAGS.out or os.path.join(HERE, "results.json")
    with open(out, "w") as f:
        json.dump({**_header(), "batch_size": b, "sections": results}, f, indent=1)
    print(f"written to {out}")


if __name__ == "__main__":
    app.run(main)
