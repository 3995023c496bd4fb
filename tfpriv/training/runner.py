"""Planning and running private training: noise calibration, checkpoints, resume, budget.

`plan_privacy` turns flags into a `PrivacyPlan` (validated, noise calibrated for a target
epsilon when one is given, given the ledger of the run it resumes); `fit_private` runs
`model.fit` with Poisson or shuffled batches, epsilon logged every epoch, a hard
`max_epsilon` stop, TensorBoard logs and checkpoints that carry the privacy ledger, the
sampling seed and every RNG of the step, so a resumed run continues its epsilon and draws
exactly the batches, partitions and noise the uninterrupted run would have drawn.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable, Mapping, Sequence

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.data.sampling import (default_max_batch_size, first_rows, make_dataset, new_sampling_seed, sampled_by,
                                  sampling_rate_and_steps)
from tfpriv.errors import ConfigError
from tfpriv.files import write_json
from tfpriv.privacy.accounting import (POISSON, RDP, RELEASE, SHUFFLE, Accountant, PrivacyLedger, Segment,
                                       get_accountant, mechanisms)
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import TermSpec
from tfpriv.run_folder import CHECKPOINTS_DIR, LOGS_DIR, PRIVACY_PLAN_FILE
from tfpriv.training.callbacks import CheckpointCallback, PrivacyCallback
from tfpriv.training.dp_model import DPModel, default_delta


__all__ = ["PrivacyPlan", "add_selection_epsilon", "fit_private", "plan_privacy", "read_ledger",
           "read_selection_epsilon", "restore_networks"]

SHUFFLE_NOTE = ("shuffled batches: accounted as one Gaussian at half the noise multiplier per epoch, "
                "no amplification by sampling (docs/privacy.md, \"Sampling schemes\")")

@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """What a private run will do and spend: the checked settings (`config`, with the calibrated noise
    when a target epsilon is given), the sampling, the planned steps, delta, the accountant and the
    ledger it continues. Made by `plan_privacy`; `fit_private` trains under it; `summary()` is what
    `privacy_plan.json` records.

    Example:
        >>> import tfpriv
        >>> from tfpriv.privacy import TermSpec
        >>> from tfpriv.training.runner import plan_privacy
        >>> plan = plan_privacy(tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
        ...                     TermSpec(sample=("loss",)), num_examples=60000, batch_size=256, epochs=1)
        >>> plan.summary()["accountant"], plan.summary()["sampling_rate"] == 256 / 60000
        ('rdp', True)
    """

    config: DPConfig
    has_batch_terms: bool
    num_examples: int
    batch_size: int
    sampling: str
    sampling_rate: float
    steps_per_epoch: int
    epochs: int
    delta: float
    target_epsilon: float | None
    max_epsilon: float | None
    history: tuple[Segment, ...] = ()  # the ledger of the run this plan continues (what the accountant composes)
    accountant: Accountant = RDP  # how epsilon is computed from the events
    steps_taken: int = 0  # the private steps of that ledger
    last_noise: float | None = None  # the effective noise multiplier of its last segment with steps
    # one-shot Gaussians (name, noise multiplier) the run makes before its first step, and those of them its
    # ledger does not hold yet (`fit_private` makes them): composed with the steps, not counted as steps
    releases: tuple[tuple[str, float], ...] = ()
    pending_releases: tuple[tuple[str, float], ...] = ()

    @property
    def effective_noise_multiplier(self) -> float:
        return self.config.effective_noise_multiplier(self.has_batch_terms)

    @property
    def planned_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def planned_segments(self) -> list[Segment]:
        """What the whole planned run is to the accountant: the history it continues, the releases it
        is still to make, then its remaining steps as the events of its sampling scheme (`mechanisms`)."""
        scheme = SHUFFLE if self.sampling == "shuffle" else POISSON
        rest = mechanisms(scheme, self.sampling_rate, self.effective_noise_multiplier,
                          max(0, self.planned_steps - self.steps_taken), self.steps_per_epoch, self.steps_taken)
        return [*self.history, *self.pending_segments(), rest]

    def pending_segments(self) -> list[Segment]:
        """The releases still to make, as the accountant composes them: one Gaussian at rate 1 each."""
        return [(1.0, noise, 1) for _, noise in self.pending_releases]

    def noise_change(self) -> str | None:
        """One line when this plan continues a ledger whose last segment had another effective noise
        multiplier (a target epsilon re-calibrated over a longer or shorter run), else None."""
        if not (self.config.private and self.history and self.last_noise is not None):
            return None
        before, now = self.last_noise, self.effective_noise_multiplier
        if math.isclose(before, now, rel_tol=1e-9):
            return None
        remaining = self.planned_steps - self.steps_taken
        why = (f" (target_epsilon={self.target_epsilon:g} re-calibrated for the remaining {remaining} planned steps)"
               if self.target_epsilon is not None and remaining > 0 else "")
        return (f"noise multiplier changes: effective {before:.4g} over the {self.steps_taken} steps taken, "
                f"{now:.4g} from here{why}")

    def summary(self) -> dict:
        cfg = self.config
        out = {
            "aggregation": cfg.aggregation,
            "noise_multiplier": cfg.noise_multiplier if cfg.private else 0.0,
            "effective_noise_multiplier": self.effective_noise_multiplier,
            "sensitivity_in_clip_units": cfg.sensitivity(self.has_batch_terms) if cfg.private else None,
            "noise_stddev": cfg.noise_stddev(self.has_batch_terms),
            # termwise: the std on parameters the batch-wise terms do not reach (their psi sum is always 0)
            "noise_stddev_unreached": cfg.noise_stddev(self.has_batch_terms, batch_terms_reach=False),
            "l2_norm_clip": cfg.l2_norm_clip,
            "batch_clip": cfg.batch_clip,
            "num_partitions": cfg.num_partitions,
            "max_batch_size": cfg.max_batch_size,
            "sampling": self.sampling,
            "sampling_rate": self.sampling_rate,
            "batch_size": self.batch_size,
            "num_examples": self.num_examples,
            "delta": self.delta,
            "target_epsilon": self.target_epsilon,
            "accountant": self.accountant.name,
            "max_epsilon": self.max_epsilon,
        }
        if self.releases:
            out["releases"] = [{"name": name, "noise_multiplier": noise, "accounted_as": [1.0, noise, 1],
                                "made": name not in dict(self.pending_releases)} for name, noise in self.releases]
        if self.steps_taken:
            out["resumed_from"] = {"steps": self.steps_taken,
                                   "epsilon": self.accountant.epsilon(self.history, self.delta),
                                   "segments": [list(seg) for seg in self.history]}
        if self.sampling == "shuffle" and cfg.private:
            out["epsilon_caveat"] = SHUFFLE_NOTE
        return out


def plan_privacy(config: DPConfig, spec: TermSpec, num_examples: int, batch_size: int, epochs: int,
                 sampling: str = "poisson", delta: float | None = None, target_epsilon: float | None = None,
                 max_epsilon: float | None = None, history: PrivacyLedger | Sequence[Segment] = (),
                 accountant: str = "rdp", releases: Mapping[str, float] | None = None) -> PrivacyPlan:
    """Validates the privacy flags together and calibrates the noise for a target epsilon.

    `history`: the ledger of the run being resumed (`read_ledger(output_dir)`; or its segments, all
    Poisson steps). With a
    target epsilon the noise is calibrated so that history + the remaining planned steps end at
    the target, not the planned steps alone (which would overshoot it). `accountant`: "rdp" or "pld"
    (`tfpriv.privacy.get_accountant`). `releases`: name -> epsilon at `delta` of each one-shot Gaussian
    the run makes before its first step (`fit_private`'s `make_releases`); each gets the noise multiplier
    of that epsilon alone, and a target epsilon covers them and the steps together.

    Example:
        The noise multiplier for epsilon = 2 at delta = 1e-5 over 3 epochs of Poisson batches of
        expected size 256 from 60,000 examples:

        >>> import tfpriv
        >>> from tfpriv.privacy import TermSpec
        >>> from tfpriv.training.runner import plan_privacy
        >>> plan = plan_privacy(tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0), TermSpec(sample=("loss",)),
        ...                     num_examples=60000, batch_size=256, epochs=3, delta=1e-5, target_epsilon=2.0)
        >>> plan.planned_steps, round(plan.config.noise_multiplier, 3)
        (702, 0.781)
    """
    if epochs < 1:
        raise ConfigError(f"epochs: must be >= 1, got {epochs}")
    if not 1 <= batch_size <= num_examples:
        raise ConfigError(f"batch_size: must be between 1 and the dataset size {num_examples}, got {batch_size}")
    if delta is None:
        delta = default_delta(num_examples)
    if not 0 < delta < 1.0 / num_examples:
        raise ConfigError(f"delta: must be in (0, 1/N) = (0, {1.0 / num_examples:.3g}) for N={num_examples}, got {delta}")
    for flag, value in (("target_epsilon", target_epsilon), ("max_epsilon", max_epsilon)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{flag}: must be a positive finite number, got {value}")
    q, steps_per_epoch = sampling_rate_and_steps(num_examples, batch_size, sampling)
    config = config.replace(expected_batch_size=float(batch_size))  # re-validates b <= B
    has_batch = spec.has_batch_terms
    if config.aggregation == "micro" and config.batch_terms_active(has_batch) and config.max_batch_size is None:
        cap = batch_size if sampling == "shuffle" else default_max_batch_size(num_examples, q)
        config = config.replace(max_batch_size=min(cap, num_examples))
    config.sensitivity(has_batch)  # raises for configurations that cannot be accounted
    chosen = get_accountant(accountant)
    planned = []
    for name, epsilon in (releases or {}).items():
        if not config.private:
            raise ConfigError(f"releases: {name!r} is a private release; a run without DP makes none")
        if not (math.isfinite(epsilon) and epsilon > 0) or (target_epsilon is not None and epsilon >= target_epsilon):
            raise ConfigError(f"releases: the epsilon of {name!r} must be positive, finite and below target_epsilon "
                              f"({target_epsilon}), got {epsilon}")
        planned.append((str(name), chosen.calibrate(epsilon, delta, 1.0, 1)))
    if planned and max_epsilon is not None and chosen.epsilon([(1.0, z, 1) for _, z in planned], delta) > max_epsilon:
        raise ConfigError(f"releases: they alone would spend more than max_epsilon={max_epsilon:g}, a hard budget")
    plan = PrivacyPlan(config, has_batch, num_examples, batch_size, sampling, q, steps_per_epoch, epochs,
                       delta, target_epsilon, max_epsilon, accountant=chosen, releases=tuple(planned),
                       pending_releases=tuple(planned))
    return continue_plan(plan, history)


def continue_plan(plan: PrivacyPlan, history: PrivacyLedger | Sequence[Segment]) -> PrivacyPlan:
    """`plan` for a run whose ledger already holds `history`: noise re-calibrated for a target epsilon
    over the mechanisms the remaining planned steps are under the plan's sampling scheme, and the
    plan's releases that `history` does not hold yet (`pending_releases`)."""
    released = {}
    if isinstance(history, PrivacyLedger):
        used = [row["noise_multiplier"] for row in history.raw_segments() if row["steps"] > 0]
        released = history.released
        steps_taken, history = history.total_steps, history.segments()
    else:  # Poisson segments
        used = [z for _, z, n in history if int(n) > 0]
        steps_taken = sum(int(n) for _, _, n in history)
    pending = []
    for name, noise in plan.pending_releases:
        if name in released:
            if not math.isclose(released[name], noise, rel_tol=1e-9):
                raise ConfigError(f"releases: the ledger holds {name!r} at noise multiplier {released[name]:.6g}, this "
                                  f"plan would make it at {noise:.6g}; continue the run with the release's epsilon "
                                  "it started with")
        elif steps_taken > 0:
            raise ConfigError(f"releases: {name!r} is made before the first step; the ledger holds {steps_taken} "
                              "steps without it")
        else:
            pending.append((name, noise))
    history = tuple((float(q), float(z), int(n)) for q, z, n in history if int(n) > 0)
    plan = dataclasses.replace(plan, history=history, steps_taken=steps_taken, last_noise=used[-1] if used else None,
                               pending_releases=tuple(pending))
    config = plan.config
    remaining = plan.planned_steps - plan.steps_taken
    if config.private and used and remaining <= 0:  # a re-run of a finished run: no step left to plan
        return noise_as_used(plan, used[-1])
    if config.private and plan.target_epsilon is not None and remaining > 0:
        scheme = SHUFFLE if plan.sampling == "shuffle" else POISSON
        # what the remaining steps are to the accountant per unit of noise (z = 1), then z scales
        rate, unit, count = mechanisms(scheme, plan.sampling_rate, 1.0, remaining, plan.steps_per_epoch,
                                       plan.steps_taken)
        composed = (*history, *plan.pending_segments())
        effective = plan.accountant.calibrate(plan.target_epsilon, plan.delta, rate, count, composed) / unit
        plan = dataclasses.replace(plan, config=config.replace(
            noise_multiplier=config.noise_multiplier_for(effective, plan.has_batch_terms)))
    return plan


def noise_as_used(plan: PrivacyPlan, effective: float) -> PrivacyPlan:
    """`plan` with the effective noise multiplier `effective` of its ledger's last segment, the noise the
    run's last steps used: what a run records when it takes no further step, instead of the flags' noise
    (their default, or one calibrated for steps that are never taken)."""
    config = plan.config
    return dataclasses.replace(plan, config=config.replace(
        noise_multiplier=config.noise_multiplier_for(effective, plan.has_batch_terms)))


def read_ledger(output_dir: str) -> PrivacyLedger:
    """The privacy ledger saved in `output_dir/checkpoints` (empty for a new run): what a resumed
    run continues (`plan_privacy`'s `history`); `.segments()` is what the accountant composes.

    Example:
        >>> import tempfile
        >>> from tfpriv.training.runner import read_ledger
        >>> read_ledger(tempfile.mkdtemp()).segments()
        []
    """
    ledger = PrivacyLedger()
    latest = tf.train.latest_checkpoint(os.path.join(output_dir, CHECKPOINTS_DIR))
    if latest is not None:
        tf.train.Checkpoint(ledger=ledger).restore(latest).expect_partial()
    return ledger


def restore_networks(checkpoint: str, **networks: tf.Module) -> int:
    """Loads the named networks of a `fit_private` checkpoint (a path such as `RUN/checkpoints/ckpt-7`)
    into freshly built ones, without the optimizers, ledger or RNG streams, and returns the critic-step
    count the checkpoint was written at. Names are the model's attributes (a GAN: `generator`, `critic`).

    For reading a run's raw weights after training (its saved `.keras` model may hold averaged ones);
    resuming a run is `fit_private`'s job.

    Example:
        A DP-WGAN-GP run's raw generator (capacity and latent size as in the run's `gan.json`):

        from tfpriv.gan.architectures import build_generator
        generator = build_generator(16, 128, 10)
        steps = restore_networks("runs/gan/checkpoints/ckpt-34", generator=generator)
    """
    if not networks:
        raise ValueError("restore_networks needs at least one network to restore (e.g. generator=...)")
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(**networks)).restore(checkpoint)
    status.assert_existing_objects_matched().expect_partial()  # every network matched; the rest left unread
    return int(tf.train.load_checkpoint(checkpoint).get_tensor("step_count/.ATTRIBUTES/VARIABLE_VALUE"))


class RunState(tf.Module):
    """What a run's mechanism owns besides the model and ledger, saved in every checkpoint:
    the sampling seed (batches are a function of (seed, step)), the completed epochs and the
    pure-DP epsilon spent by noisy selections on the run's private validation split after
    training (`add_selection_epsilon`), so that total travels with the ledger."""

    def __init__(self, sampling_seed: int):
        super().__init__(name="run_state")
        self.sampling_seed = tf.Variable(sampling_seed, dtype=tf.int64, trainable=False, name="sampling_seed")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.selection_epsilon = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="selection_epsilon")


SELECTION_EPSILON_KEY = "run/selection_epsilon/.ATTRIBUTES/VARIABLE_VALUE"  # RunState's, as `fit_private` saves it


def _latest_with_selections(output_dir: str) -> str:
    latest = tf.train.latest_checkpoint(os.path.join(output_dir, CHECKPOINTS_DIR))
    if latest is None or SELECTION_EPSILON_KEY not in tf.train.load_checkpoint(latest).get_variable_to_dtype_map():
        raise ConfigError(f"output_dir: {os.path.join(output_dir, CHECKPOINTS_DIR)} holds no checkpoint with the "
                          "epsilon of the selections on the run's validation split (missing, or written before "
                          "the checkpoint kept it); without it their total cannot continue")
    return latest


def read_selection_epsilon(output_dir: str) -> float:
    """The epsilon that noisy selections on the run's private validation split have spent so far, as
    the run's latest checkpoint (next to its privacy ledger) holds it. Raises ConfigError without one.

    Example:
        The selections a DPImageBench-protocol GAN run and its re-scores made on its split:

        spent = read_selection_epsilon("runs/gan")
    """
    latest = _latest_with_selections(output_dir)
    return float(tf.train.load_checkpoint(latest).get_tensor(SELECTION_EPSILON_KEY))


def add_selection_epsilon(output_dir: str, epsilon: float) -> float:
    """Adds `epsilon` (a noisy selection on the run's validation split) to the total in the run's
    latest checkpoint and returns the new total. The checkpoint is rewritten with every other value
    unchanged, so a resumed run and every later selection continue from it; deleting or leaving
    behind a record file does not restart it.

    Example:
        After a noisy selection of epsilon 0.5 on the validation split of the run in runs/gan:

        total = add_selection_epsilon("runs/gan", 0.5)
    """
    latest = _latest_with_selections(output_dir)
    reader = tf.train.load_checkpoint(latest)
    dtypes = reader.get_variable_to_dtype_map()
    total = float(reader.get_tensor(SELECTION_EPSILON_KEY)) + float(epsilon)
    names = sorted(dtypes)
    values = [tf.constant(total if n == SELECTION_EPSILON_KEY else reader.get_tensor(n), dtypes[n]) for n in names]
    staged = latest + "-staged"
    tf.raw_ops.SaveV2(prefix=staged, tensor_names=names, shape_and_slices=[""] * len(names), tensors=values)
    for path in sorted(tf.io.gfile.glob(staged + ".*"), key=lambda p: p.endswith(".index")):  # the index last
        os.replace(path, latest + path[len(staged):])
    return total


def _release(ledger: PrivacyLedger, plan: PrivacyPlan, make_releases) -> None:
    """Makes the plan's pending releases through `make_releases` and checks the ledger then holds
    exactly them, at the noise the plan composed (anything else would break the plan's epsilon)."""
    pending = dict(plan.pending_releases)
    if make_releases is None:
        raise ConfigError(f"make_releases: the plan holds releases ({', '.join(pending)}) but nothing makes them")
    if tf.distribute.has_strategy():
        raise ConfigError("make_releases: releases are made on one device; train without a tf.distribute strategy")
    before = ledger.released
    make_releases(ledger, pending)
    if ledger.released != {**before, **pending} or ledger.total_steps:
        raise ConfigError(f"make_releases: the ledger must record exactly the releases {pending} and no step, "
                          f"it holds {ledger.released} and {ledger.total_steps} steps")


def batch_terms_reach(engine) -> dict | None:
    """How many parameters the batch-wise terms reach (full termwise noise) and do not (sample-wise
    noise only), once the engine has traced a step with them; None otherwise."""
    reaches = getattr(engine, "psi_reaches", None)
    if reaches is None:
        return None
    sizes = [int(v.shape.num_elements()) for v in engine.variables]
    return {"reached_parameters": sum(n for n, r in zip(sizes, reaches) if r),
            "unreached_parameters": sum(n for n, r in zip(sizes, reaches) if not r)}


def fit_private(model: DPModel, arrays, plan: PrivacyPlan,
                optimizer: keras.optimizers.Optimizer | Sequence[keras.optimizers.Optimizer],
                output_dir: str, seed: int | None = None, verbose: int = 2,
                extra_callbacks: Sequence[keras.callbacks.Callback] = (), announce_budget_stop: bool = True,
                make_releases: Callable[[PrivacyLedger, Mapping[str, float]], None] | None = None) -> dict:
    """Compiles and fits any `DPModel` under `plan`; resumes from `output_dir/checkpoints` if present.

    `arrays`: the training data (an array or a tuple of arrays with one row per example).
    `optimizer`: the model's optimizer, or its tuple of optimizers (a GAN: critic, generator).
    `seed` seeds the batch sampling (None: a fresh seed from the OS); on resume the seed saved
    in the checkpoint is used, and batches continue from the steps already taken. Writes
    `privacy_plan.json`, checkpoints (model, optimizers, ledger, RNG streams, sampler seed,
    epoch) after every epoch and TensorBoard logs. `verbose=2` also prints a line every 30 s of a
    long epoch (`tfpriv.training.progress.Heartbeat`, which `fit` adds). A stop at `plan.max_epsilon` prints one line
    (ε spent, steps) unless `announce_budget_stop` is False (the command line prints its own).
    `make_releases(ledger, {name: noise multiplier})` makes the plan's releases the ledger does not hold
    yet, before the first step (e.g. DP class means a generator is pretrained on): it records each with
    `ledger.release` and may change the model; both are checkpointed at once, before any step, so a
    restarted run continues from them instead of releasing again.
    Returns the run's record: `epsilon`, `steps`, `history` (per-epoch logs), `resumed`, ...

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> import tfpriv
        >>> from tfpriv.compat import keras
        >>> from tfpriv.privae.architectures import build_architecture
        >>> from tfpriv.privae.vae import VAE
        >>> from tfpriv.training.runner import fit_private, plan_privacy
        >>> vae = VAE(*build_architecture("mlp", [12], 3))
        >>> plan = plan_privacy(tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1,
        ...                                     num_partitions=1), vae.term_spec(), 64, 8, 1, delta=1e-3)
        >>> x = (np.random.default_rng(0).random((64, 12)) > 0.5).astype("float32")
        >>> out = fit_private(vae, x, plan, keras.optimizers.Adam(1e-2), tempfile.mkdtemp(), seed=0, verbose=0)
        >>> out["steps"], round(out["epsilon"], 2)
        (8, 1.94)
    """
    saved = read_ledger(output_dir)
    if plan.config.private and (list(plan.history) != [s for s in saved.segments() if s[2] > 0]
                                or plan.steps_taken != saved.total_steps):
        plan = continue_plan(plan, saved)
    optimizers = tuple(optimizer) if isinstance(optimizer, (tuple, list)) else (optimizer,)
    model.compile(*optimizers, dp=plan.config, num_examples=plan.num_examples, delta=plan.delta,
                  max_epsilon=plan.max_epsilon, accountant=plan.accountant.name)
    engine = model.prepare(first_rows(arrays))
    state = RunState(new_sampling_seed() if seed is None else seed)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, ledger=model.ledger,
                                     noise=engine.generator, loss_rng=model.rng, step_count=model.step_count,
                                     run=state)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(output_dir, CHECKPOINTS_DIR), max_to_keep=2)
    resumed = manager.latest_checkpoint is not None
    if resumed:
        latest = manager.latest_checkpoint
        if SELECTION_EPSILON_KEY not in tf.train.load_checkpoint(latest).get_variable_to_dtype_map():
            # written before the selections' total was kept: the same objects without it (total 0)
            run = tf.train.Checkpoint(sampling_seed=state.sampling_seed, epoch=state.epoch)
            tf.train.Checkpoint(model=model, optimizer=model.optimizer, ledger=model.ledger, noise=engine.generator,
                                loss_rng=model.rng, step_count=model.step_count,
                                run=run).restore(latest).assert_existing_objects_matched()
        else:
            checkpoint.restore(latest).assert_existing_objects_matched()
    if plan.config.private and plan.pending_releases:
        _release(model.ledger, plan, make_releases)
        manager.save()  # the releases and what they changed, before any step
        plan = dataclasses.replace(plan, history=(*plan.history, *plan.pending_segments()), pending_releases=())
    dataset, q, steps_per_epoch = make_dataset(arrays, plan.batch_size, plan.sampling,
                                               int(state.sampling_seed.numpy()), int(model.step_count.numpy()))
    noise = plan.effective_noise_multiplier
    if plan.config.private:  # after the restore: continues or folds the saved segment
        start = int(model.step_count.numpy())
        model.ledger.begin(q, noise, sampled_by(dataset).scheme, steps_per_epoch, start)
    write_json(os.path.join(output_dir, PRIVACY_PLAN_FILE), {**plan.summary(), "planned_steps": plan.planned_steps})
    privacy = (PrivacyCallback(model.ledger, plan.delta, plan.max_epsilon, plan.accountant,
                               announce=announce_budget_stop) if plan.config.private else None)
    callbacks = ([privacy] if privacy else []) + [
        CheckpointCallback(manager, state.epoch),
        keras.callbacks.TensorBoard(os.path.join(output_dir, LOGS_DIR), write_graph=False),
        *extra_callbacks,
    ]  # at verbose=2 `fit` adds the Heartbeat
    initial_epoch = int(state.epoch.numpy())
    history = {}
    start = time.time()
    if initial_epoch < plan.epochs and not (privacy and privacy.allowed == 0):
        change = plan.noise_change()
        if change:  # at every verbosity: the continued run spends per step not what it spent before
            print(change, flush=True)
        hist = model.fit(dataset, epochs=plan.epochs, initial_epoch=initial_epoch,
                         steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=verbose)
        history = {k: [float(v) for v in vs] for k, vs in hist.history.items()}
    used = [row["noise_multiplier"] for row in model.ledger.raw_segments() if row["steps"] > 0]
    if plan.config.private and used and model.ledger.total_steps == plan.steps_taken:
        plan = noise_as_used(plan, used[-1])  # no step taken (a step or time limit, the budget): record the noise used
        write_json(os.path.join(output_dir, PRIVACY_PLAN_FILE), {**plan.summary(), "planned_steps": plan.planned_steps})
    train_steps = int(model.step_count.numpy())
    as_if_poisson = {}
    if plan.config.private and plan.sampling == "shuffle":  # a labelled second figure, not the epsilon
        as_if_poisson["epsilon_as_if_poisson"] = plan.accountant.epsilon(
            [tuple(row["accounted_as"]) if row["scheme"] == RELEASE else
             (row["sampling_rate"], row["noise_multiplier"], row["steps"]) for row in model.ledger.raw_segments()],
            plan.delta)
    return {
        **as_if_poisson,
        "ledger": model.ledger.raw_segments() if plan.config.private else [],
        "batch_terms_reach": batch_terms_reach(model.engine),
        "epsilon": model.epsilon(plan.delta),
        "steps": model.ledger.total_steps if plan.config.private else train_steps,
        "train_steps": train_steps,
        "epochs_completed": int(state.epoch.numpy()),
        "steps_per_epoch": steps_per_epoch,
        "resumed": resumed,
        "budget_reached": bool(privacy and privacy.budget_reached),
        "train_seconds": time.time() - start,
        "history": history,
        "plan": plan,
    }
