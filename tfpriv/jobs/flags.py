"""Flags shared by every job, and tfpriv's flag object (`FLAGS`) every flag of tfpriv and its families
is defined on. Job-specific flags live beside their jobs (defined once, there).

A flag's default below is the main job's (PriVAE); a job may have its own default for a shared
flag (its `Job.defaults`, tfpriv/jobs/job.py; e.g. --dataset=mnist for the GANs). A value the user
gives always wins; a shared flag a job does not read is refused rather than ignored.
"""
import functools

from absl import flags

# tfpriv's own flags: never absl's global `flags.FLAGS`, so that importing tfpriv (or calling
# `tfpriv.load`) inside a user's absl program clashes with none of its flags. Only the command line
# (tfpriv.cli.main) puts these Flag objects into the process's FLAGS, to parse its argv.
FLAGS = flags.FlagValues()
# DEFINE_* bound to FLAGS. `partial`, not a wrapper: absl records the caller's module as the flag's
# module (--help groups flags by it), and a wrapper function here would be recorded instead.
DEFINE_string = functools.partial(flags.DEFINE_string, flag_values=FLAGS)
DEFINE_integer = functools.partial(flags.DEFINE_integer, flag_values=FLAGS)
DEFINE_float = functools.partial(flags.DEFINE_float, flag_values=FLAGS)
DEFINE_boolean = functools.partial(flags.DEFINE_boolean, flag_values=FLAGS)
DEFINE_list = functools.partial(flags.DEFINE_list, flag_values=FLAGS)

MODES = ("train", "sample")

DEFINE_string("model", "privae", "Model to train: privae (= vae), dpwgan_gp, dpgan, filter, or a family "
              "registered with tfpriv.families.register.")
DEFINE_string("mode", "train", f"{', '.join(MODES)}: train a model, or draw samples from a trained run in --output_dir.")
DEFINE_string("dataset", "digits", "digits (bundled, no download), mnist, fashion_mnist, adult, abalone, pinwheel, "
              "or tfds:<name>. Default per model: digits (privae), mnist (GANs, filter).")
DEFINE_string("data_dir", None, "Folder with the original-format data files (mnist/, fashion_mnist/, adult/, abalone/; "
              "or the dataset's own folder). Without it mnist is read from the copy bundled with tfpriv; "
              "with it the files must be there.")
DEFINE_string("feature_scaling", "auto", "adult/abalone preprocessing: public (fixed public constants and schema; "
              "see tfpriv/data/uci.py), train (train-split mean/std and categories: not private, refused with "
              "private training) or auto (public when a model is trained privately, train otherwise).")
DEFINE_string("output_dir", None, "Run folder (results.json, checkpoints, logs). Default: runs/<model>-<dataset>-<time>. "
              "An existing run resumes; its earlier segments stay in results.json.")
DEFINE_integer("seed", None, "Seed for initialisation, sampling and noise. Default: drawn from the OS (needed for a real release).",
               lower_bound=0, upper_bound=2**32 - 1)  # what NumPy and TensorFlow accept
DEFINE_integer("epochs", 20, "Training epochs (an epoch is N/B steps). Default per model: 20 (privae, dpgan), 40 (dpwgan_gp).")
DEFINE_integer("batch_size", 64, "Expected batch size B = qN (Poisson) or fixed batch size (shuffle). "
               "Default per model: 64 (privae, dpgan), 128 (dpwgan_gp).")
DEFINE_float("learning_rate", 1e-3, "Learning rate. Default per model: 1e-3 (privae), 5e-5 (dpgan), "
             "batch_size x 3.125e-6 (dpwgan_gp).")
DEFINE_string("lr_schedule", "constant", "constant, or cosine: the learning rate decays to 0 over the planned "
              "epochs (Loshchilov & Hutter 2017). Data-independent, so it costs no privacy.")
DEFINE_string("aggregation", "termwise", "none, micro, batch or termwise (see docs/privacy.md). "
              "Default per model: termwise (privae), micro (GANs), none (filter).")
DEFINE_string("sampling", "poisson", "poisson (each example in a batch with probability B/N: amplification by "
              "sampling) or shuffle (fixed-size batches of a fresh permutation each epoch, accounted as one Gaussian "
              "at half the noise multiplier per epoch: a much larger epsilon; docs/privacy.md).")
DEFINE_float("l2_norm_clip", 1.0, "C: per-example clip norm (C1 of the sample-wise terms in termwise mode).")
DEFINE_float("batch_clip", 0.5, "C2: per-partition clip norm of batch-wise terms (termwise); 0 drops them from the gradient.")
DEFINE_integer("num_partitions", 4, "b: partitions of each batch for batch-wise terms (termwise); 0 = one per example.")
DEFINE_float("noise_multiplier", 3.5, "z: noise std over clip norm for each clipped block. Not with --epsilon, "
             "which calibrates it. Default per model: 3.5 (privae, filter), 0.5 (dpwgan_gp), 1.0 (dpgan).")
DEFINE_float("epsilon", None, "Target epsilon: calibrates the noise multiplier for the planned steps "
             "(not with --noise_multiplier or --aggregation=none).")
DEFINE_float("delta", None, "delta; must be < 1/N. Default: the power of ten below min(1/N, 1e-5).")
DEFINE_string("accountant", "rdp", "How epsilon is computed from the same events: rdp (dp_accounting's RDP accountant) or "
              "pld (its privacy-loss-distribution accountant: a tighter epsilon, slower to calibrate). "
              "Calibration, --max_epsilon and results.json use it.")
DEFINE_float("max_epsilon", None, "Hard budget: training stops before a step would exceed it.")
DEFINE_integer("max_batch_size", None, "micro with batch-wise terms: batches above this are skipped (bounds the sensitivity).")
DEFINE_string("clipping", "fast", "fast (ghost norms, per-layer rules), per_example (vectorized_map over examples; "
              "exact for second-order losses), vectorized (per-example Jacobians) or auto (fast where the "
              "first-batch check finds it exact, else per_example; one line names each layer's path). "
              "Default per model: fast, per_example (dpwgan_gp).")
DEFINE_string("clipped_sum", "bookkeeping", "bookkeeping (from the first pass) or reweight (second backward pass).")
DEFINE_integer("latent_dim", None, "Latent dimension of the VAE (default per dataset).")
DEFINE_float("beta", 1.0, "Weight of the per-example KL term of the VAE.")
DEFINE_integer("num_samples", None, "--mode=sample: samples to draw. Default per model: 64 (privae); "
               "10000 (GANs, also the samples of the final scores).")
DEFINE_string("strategy", "default", "default (one device), mirrored (every local device: the GPUs, else the "
              "--num_cpu_devices logical CPUs) or multi_worker (the cluster in TF_CONFIG; the chief writes "
              "--output_dir). Results match one device's; see README, More than one device or machine.")
DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many logical devices (for --strategy=mirrored "
               "without GPUs, e.g. to test it). Default: TensorFlow's one CPU device.")
DEFINE_integer("verbose", 2, "0 silent, 1 progress bar, 2 one line per epoch (and one every 30 s of a long "
               "epoch); > 0 also prints progress of long evaluations.")
