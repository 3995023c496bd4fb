"""`DPModel`: a Keras model whose `train_step` feeds its loss terms to the DP engine.

Subclasses implement `term_spec()` and `loss_terms(x, layout, training)`; everything else
(clipping, noise, counting steps in the ledger, epsilon in the logs, metrics) is shared. Hooks
let a family say which variables the engine privatizes (`private_variables`, under
`private_root`), what the engine's loss sees (`private_inputs`, e.g. a GAN's real batch plus its
fakes) and what runs after each privatized update (`after_private_step`, e.g. the generator
step, which only sees the private critic: post-processing). Usage, as with any Keras model:

    model.compile(optimizer, dp=DPConfig(..., expected_batch_size=B), num_examples=N, delta=1e-5)
    model.fit(x, epochs=...)            # numpy: Poisson batches of expected size B
    history.history["epsilon"]          # the accountant's epsilon after each epoch

The ledger is advanced inside the compiled step, so any `fit` (with or without the runner,
under keras-tuner, resumed or not) reports the epsilon of the steps actually taken, each
accounted as what its batch was (the sampling contract, docs/privacy.md "Sampling schemes"):
arrays and `tfpriv.data.poisson_batches` are Poisson steps tfpriv drew; a dataset or generator
tfpriv did not sample is refused unless `fit(..., sampling=...)` declares it ("poisson": the user's
claim of Poisson sampling at the compiled rate; "fixed": any other batches, accounted without
amplification); a step outside `fit` (`train_on_batch`, a loop calling `train_step`) is "fixed".
"""
from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import tensorflow as tf

from tfpriv.compat import converted, keras
from tfpriv.data.sampling import (default_max_batch_size, first_rows, make_dataset, new_sampling_seed, packer,
                                  sampled_by)
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DECLARED_POISSON, FIXED, POISSON, SHUFFLE, PrivacyLedger, get_accountant
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.engine import DPGradientEngine, public_batch
from tfpriv.privacy.rng import in_step, stream_generator
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.callbacks import BudgetExhausted, PrivacyCallback
from tfpriv.training.progress import Heartbeat
from tfpriv.training.state import DPState

NON_PRIVATE = DPConfig(aggregation="none", num_partitions=1)


def default_delta(num_examples: int) -> float:
    """The power of ten below min(1/N, 1e-5)."""
    delta = 10 ** math.floor(math.log10(1.0 / num_examples)) if num_examples > 1 else 1e-5
    return min(delta, 1e-5)


def _state_field(name: str) -> property:
    """`model.<name>`, read-only, is `model.dp_state.<name>`: fields are written through the state, so
    no assignment leaves a copy on the model for Keras to track."""
    return property(lambda self: getattr(self.dp_state, name), doc=f"`dp_state.{name}` (read-only).")


class DPTraining:
    """What every private model does, whichever Keras its model class comes from: mixed into
    `DPModel` (Keras 2) and, for a Keras 3 model, `tfpriv.training.keras3`'s classes."""

    keras_module = keras  # the Keras of the model class: its metrics and progress bar
    budget_name = "max_epsilon"  # the parameter the budget came from (`make_private`: "target_epsilon")
    state_type: type[DPState] = DPState  # what `dp_state` is (make_private's model adds its loss's facts)
    # Whether the model's own loss computes in float64 when its layers do (`keras.backend.set_floatx`): the
    # engine does; the families' losses build float32 constants and partition masks (make_private's: yes).
    trains_in_float64 = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Randomness inside the loss (reparameterisation, prior samples, GAN latents) draws from
        # `rng`; compile re-seeds it from the DP config's seed. A plain object, so neither Keras
        # tracks it (`tfpriv.training.state`): the runner checkpoints its variables by name.
        self.dp_state = self.state_type(rng=stream_generator(None, "loss"))

    # The DP state, read-only: `compile` sets it, `dp_state.swapped` stands a field in for a while.
    dp_config = _state_field("dp_config")
    num_examples = _state_field("num_examples")
    delta = _state_field("delta")
    max_epsilon = _state_field("max_epsilon")
    accountant = _state_field("accountant")
    engine = _state_field("engine")
    rng = _state_field("rng")
    ledger = _state_field("ledger")
    step_count = _state_field("step_count")

    # -- what a family defines -------------------------------------------------------------------
    def term_spec(self) -> TermSpec:
        raise NotImplementedError(f"{type(self).__name__} must declare its loss terms")

    def loss_terms(self, x, layout: BatchLayout, training: bool = True) -> LossTerms:
        raise NotImplementedError(f"{type(self).__name__} must compute its loss terms")

    def private_root(self) -> tf.Module:
        """The layers whose variables the engine privatizes (their calls are recorded)."""
        return self

    def private_variables(self) -> list[tf.Variable]:
        return self.private_root().trainable_variables

    def private_inputs(self, data):
        """What the engine's loss receives for one batch (a GAN adds each example's fake)."""
        return data[0] if isinstance(data, tuple) and len(data) == 1 else data

    def after_private_step(self) -> dict:
        """Non-private work after each privatized update; returns logs (value or (value, weight))."""
        return {}

    def audit_options(self) -> dict:
        """Keyword arguments of `tfpriv.audit.audit_sensitivity` for this model: which inputs an
        added example's owner controls (`adversary_keys`), `num_classes` of integer labels,
        `graph` when the loss draws no random numbers. Default: every input, eager."""
        return {}

    def step_logs(self, logs: dict) -> dict:
        """The logged metrics of one step from the engine's term means (default: terms + loss)."""
        spec = self.term_spec()
        logs["loss"] = tf.add_n([logs[k] for k in (*spec.sample, *spec.batch)])
        return logs

    def metric_names(self) -> list[str]:
        spec = self.term_spec()
        return ["loss", *spec.sample, *spec.batch]

    # -- compile / prepare -------------------------------------------------------------------------
    def compile(self, optimizer="adam", dp: DPConfig | None = None, num_examples: int | None = None,
                delta: float | None = None, max_epsilon: float | None = None, accountant: str = "rdp", **kwargs):
        """dp: how the loss is privatized. A private `dp` needs `num_examples` (N: the sampling
        rate q = dp.expected_batch_size / N is what the accountant composes); `delta` defaults to
        the power of ten below min(1/N, 1e-5); `max_epsilon` stops training before exceeding it;
        `accountant`: "rdp" or "pld" (dp_accounting), how epsilon is computed from the ledger."""
        resolved = get_accountant(accountant)  # ConfigError naming `accountant` for an unknown name
        super().compile(optimizer=optimizer, **kwargs)
        dp = dp if dp is not None else NON_PRIVATE
        if dp.private:
            if num_examples is None or num_examples < 1:
                raise ConfigError("num_examples: a private model needs the training set size N to account "
                                  f"its steps (sampling rate q = expected_batch_size / N), got {num_examples}")
            if dp.expected_batch_size is None:
                raise ConfigError("dp.expected_batch_size: a private model needs the expected batch size B")
            if not 0 < dp.expected_batch_size <= num_examples:
                raise ConfigError(f"dp.expected_batch_size: must be in (0, num_examples={num_examples}], "
                                  f"got {dp.expected_batch_size}")
            delta = default_delta(num_examples) if delta is None else delta
            if not 0 < delta < 1.0 / num_examples:
                raise ConfigError(f"delta: must be in (0, 1/N) = (0, {1.0 / num_examples:.3g}), got {delta}")
        # The ledger and the step counter are saved through `tf.train.Checkpoint` by the runner, not
        # in model weights; a ledger already there (a resumed run, `load_private`) is continued.
        state = self.dp_state
        state.dp_config, state.num_examples, state.delta, state.max_epsilon = dp, num_examples, delta, max_epsilon
        state.accountant, state.engine, state.trackers = resolved, None, {}
        with self.distribute_strategy.scope():
            state.rng = stream_generator(dp.seed, "loss")
            if state.ledger is None:
                state.ledger = PrivacyLedger()
            if state.step_count is None:
                # One per global step, however many replicas run it.
                state.step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_count",
                                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        if dp.private:  # a step outside fit (train_on_batch, a loop calling train_step) is a fixed batch
            self.ledger.begin(self.sampling_rate, self.effective_noise_multiplier, FIXED)

    @property
    def sampling_rate(self) -> float:
        return self.dp_config.expected_batch_size / self.num_examples

    @property
    def effective_noise_multiplier(self) -> float:
        return self.dp_config.effective_noise_multiplier(self.term_spec().has_batch_terms)

    def epsilon(self, delta: float | None = None) -> float:
        """The accountant's epsilon for the steps taken so far (inf for a non-private model)."""
        if not self.dp_config.private:
            return math.inf
        return self.ledger.epsilon(self.delta if delta is None else delta, self.accountant)

    def prepare(self, sample_batch) -> DPGradientEngine:
        """Builds variables, the engine and metric trackers; verifies the clipping path once.

        Only the structure, trailing shapes and dtypes of `sample_batch` are read: variables are
        built and the path verified on a public batch of that shape (`public_batch`), so no
        record decides whether the model trains.
        """
        if self.engine is not None:
            return self.engine
        if self.dp_config is None:
            raise RuntimeError("call compile() before fit()")
        if tf.as_dtype(self.dtype) == tf.float64 and not self.trains_in_float64:
            raise ConfigError(f"model: {type(self).__name__} computes in float32 only, and it was built in float64 "
                              "(keras.backend.set_floatx('float64')); models from tfpriv.make_private train in float64")
        batch = public_batch(sample_batch)
        strategy = self.distribute_strategy
        # Variables and the noise generator must live in the distribution strategy's scope.
        with strategy.scope():
            distributed = tf.distribute.has_strategy()  # any strategy but the default, one replica too
            # Building and checking are not steps: the random streams continue as if they had not run.
            streams = [(self.rng, self.rng.state.read_value())]
            inputs = self.private_inputs(batch)
            n = tf.shape(tf.nest.flatten(inputs)[0])[0]
            self.loss_terms(inputs, BatchLayout.single(n), training=False)  # creates variables
            self.build_extra(batch)
            engine = DPGradientEngine(self.dp_config, self.private_root(), self.term_spec(),
                                      variables=self.private_variables(), loss_rng=self.rng)
            if hasattr(self.optimizer, "build"):
                self.optimizer.build(engine.variables)  # slots now, so the train step traces once
        self.dp_state.engine = engine
        streams.append((engine.generator, engine.generator.state.read_value()))
        if self.dp_config.private and (self.dp_config.verify or self.dp_config.clipping == "auto"):
            if distributed:  # in replica context: mirrored variables have no handle outside it
                strategy.run(engine.verify, args=(self.loss_fn, inputs))
            else:
                engine.verify(self.loss_fn, inputs)
        for generator, state in streams:
            generator.state.assign(state)
        metrics = self.keras_module.metrics
        trackers = self.dp_state.trackers
        for name in self.metric_names():
            trackers.setdefault(name, metrics.Mean(name=name))
        if self.dp_config.private:  # the engine's count of NaN/inf examples dropped, summed per epoch
            trackers["dropped"] = metrics.Sum(name="dropped")
        return engine

    def build_extra(self, sample_batch) -> None:
        """Builds what the private loss does not (e.g. a GAN's generator optimizer)."""
        return None

    # -- fit ---------------------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            steps_per_epoch=None, seed: int | None = None, sampling: str | None = None, **kwargs):
        """Keras `fit`, private-aware: each step is accounted as what its batch was.

        Arrays (numpy or tensors): a private model draws Poisson batches of expected size
        dp.expected_batch_size, round(1/q) steps an epoch, from (seed, step). A dataset made by
        `tfpriv.data.poisson_batches` (or tfpriv's own samplers) is accounted by its tag. Any other
        `tf.data.Dataset` or generator needs `sampling`: "poisson" (you declare that every example
        is in each batch independently with probability q = B/N; the records say the claim is
        yours; a first batch far above B is refused) or "fixed" (any batches holding each record at
        most once: a Gaussian at half the noise multiplier per step, no amplification). `epsilon`
        is added to every epoch's logs (progress bar and History) and `max_epsilon` stops training.
        """
        private = self.dp_config is not None and self.dp_config.private
        tag = first = None
        if private:
            x, y, kwargs = self._private_fit_arguments(x, y, kwargs)
        if private and _is_arrays(x):
            if sampling not in (None, "poisson"):
                raise ConfigError(f"sampling: arrays are Poisson-sampled by tfpriv; got sampling={sampling!r} "
                                  "(declare a scheme only for a dataset or generator you batched)")
            if batch_size is not None and batch_size != self.dp_config.expected_batch_size:
                raise ConfigError(f"batch_size: a private model samples batches of expected size "
                                  f"{self.dp_config.expected_batch_size:g} (dp.expected_batch_size), got {batch_size}")
            # x (and y) may be several arrays (a multi-input model): sampled as one flat tuple, each
            # batch packed back into the given structure.
            structure = _as_arrays(x) if y is None else (_as_arrays(x), _as_arrays(y))
            flat = tuple(tf.nest.flatten(structure))
            for name, parts in (("x", tf.nest.flatten(structure if y is None else structure[0])),
                                ("y", [] if y is None else tf.nest.flatten(structure[1]))):
                for part in parts:
                    if len(part) != self.num_examples:
                        raise ConfigError(f"{name}: has {len(part)} examples, the model was compiled for "
                                          f"num_examples={self.num_examples}")
            seed = new_sampling_seed() if seed is None else seed
            start = int(self.step_count.numpy()) if self.step_count is not None else 0
            if self.engine is None:  # prepared on the arrays' first row, not on a batch drawn from a new iterator
                first = packer(structure)(*first_rows(flat))
            x, _, per_epoch = make_dataset(flat, int(round(self.dp_config.expected_batch_size)), "poisson",
                                           seed, start, pack=packer(structure))
            tag = sampled_by(x)
            y, steps_per_epoch = None, steps_per_epoch or per_epoch
        if isinstance(x, tf.data.Dataset):  # used as given (Keras 3 warns that it ignores shuffle=True)
            kwargs.setdefault("shuffle", False)
        if first is None and (self.engine is None or (private and tag is None and sampled_by(x) is None)):
            x, first = _peek(x, y)
        if self.engine is None:
            self.prepare(first)
        if private:
            self._begin_segment(tag or sampled_by(x), sampling, first)
        callbacks = list(callbacks or [])
        if private and not any(isinstance(c, PrivacyCallback) for c in callbacks):
            callbacks.insert(0, PrivacyCallback(self.ledger, self.delta, self.max_epsilon, self.accountant,
                                                budget_name=self.budget_name))
        if verbose == 2 and steps_per_epoch and not any(isinstance(c, Heartbeat) for c in callbacks):
            callbacks.append(Heartbeat(steps_per_epoch))  # a line during long epochs (Keras prints at their end)
        if verbose != 0 and not any(isinstance(c, self.keras_module.callbacks.ProgbarLogger) for c in callbacks):
            # After the privacy callback, so the progress bar's epoch line shows epsilon.
            callbacks.append(self.progress_bar())
        try:
            return super().fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose, callbacks=callbacks,
                               steps_per_epoch=steps_per_epoch, **kwargs)
        finally:
            if private:  # steps after this fit, outside any fit, are fixed batches
                self.ledger.begin(self.sampling_rate, self.effective_noise_multiplier, FIXED)

    def _private_fit_arguments(self, x, y, kwargs: dict):
        """Keras' `fit` arguments with their meaning under DP (docs/guide.md, "fit and compile under
        DP"): `validation_split` holds the last fraction of the arrays out of private training (as
        Keras does, before any sampling), so `num_examples` must be the rest; validation metrics are
        not covered by epsilon (said once); `sample_weight` and `class_weight` are refused."""
        for name in ("sample_weight", "class_weight"):
            if kwargs.get(name) is not None:
                raise ConfigError(
                    f"{name}: not supported by a private model: each example's gradient is clipped at C before "
                    "the sum, so a weight above 1 is cut back by the clip and a weight in [0, 1] is undone for "
                    "any example whose gradient exceeds C (weights applied after clipping are not implemented)")
        split = kwargs.pop("validation_split", 0.0) or 0.0
        if split:
            if not _is_arrays(x):
                raise ConfigError("validation_split: only for arrays (as in Keras); for a dataset or generator "
                                  "pass validation_data=")
            if kwargs.get("validation_data") is not None:
                raise ConfigError("validation_split: give validation_split or validation_data, not both")
            structure = _as_arrays(x) if y is None else (_as_arrays(x), _as_arrays(y))
            n = len(tf.nest.flatten(structure)[0])
            at = int(math.floor(n * (1.0 - split)))  # Keras' split: the last fraction, unshuffled
            if at != self.num_examples:
                raise ConfigError(f"validation_split: {split:g} holds out the last {n - at} of {n} examples, so "
                                  f"private training sees {at}; make the model with num_examples={at} (the "
                                  f"accountant's N), got {self.num_examples}")
            train = tf.nest.map_structure(lambda a: a[:at], structure)
            kwargs["validation_data"] = tf.nest.map_structure(lambda a: a[at:], structure)
            x, y = (train, None) if y is None else train
        if kwargs.get("validation_data") is not None and not self.dp_state.said_validation:
            self.dp_state.said_validation = True
            print("tfpriv: validation metrics (val_*) are computed without privacy on the validation data: epsilon "
                  "does not cover them (docs/privacy.md)", file=sys.stderr)
        return x, y, kwargs

    def _begin_segment(self, tag, sampling: str | None, first) -> None:
        """Starts (or continues) the ledger segment that accounts this fit's batches (the sampling
        contract); refuses what cannot be accounted, naming the argument."""
        q, noise, n = self.sampling_rate, self.effective_noise_multiplier, self.num_examples
        steps = int(self.step_count.numpy())
        if tag is not None:
            if sampling is not None and sampling != tag.scheme:
                raise ConfigError(f"sampling: the dataset was drawn by tfpriv's {tag.scheme} sampler; got "
                                  f"sampling={sampling!r} (leave it unset)")
            if not math.isclose(tag.sampling_rate, q, rel_tol=1e-9):
                raise ConfigError(f"x: the dataset samples at rate {tag.sampling_rate:.6g} ({tag.num_examples} "
                                  f"examples); the model was compiled for q = {q:.6g} (B/N with N={n})")
            if tag.scheme == SHUFFLE:
                if tag.next_step != steps:
                    raise ConfigError(f"x: this shuffled dataset starts at step {tag.next_step}, the model has taken "
                                      f"{steps} steps (make a new one with start_step={steps})")
                self.ledger.begin(q, noise, SHUFFLE, tag.steps_per_epoch, steps)
                tag.next_step = -1  # one fit only: its epochs are counted from this start
                return
            tag.next_step = steps  # this fit's first batch is the model's next step: none used twice
            self.ledger.begin(q, noise, POISSON)
            return
        if sampling == "poisson":
            size = int(tf.shape(tf.nest.flatten(first)[0])[0]) if first is not None else 0
            cap = default_max_batch_size(n, q)
            if size > cap:
                raise ConfigError(f"sampling: a Poisson batch at q = {q:.4g} from N={n} has size <= {cap} but for "
                                  f"negligible probability; the first batch has {size} examples")
            self.ledger.begin(q, noise, DECLARED_POISSON)
        elif sampling == "fixed":
            self.ledger.begin(q, noise, FIXED)
        else:
            raise ConfigError(
                f"x: tfpriv did not sample this dataset's or generator's batches, so it cannot know what ran (got sampling="
                f"{sampling!r}): pass arrays (Poisson batches drawn by tfpriv), a tfpriv.data.poisson_batches "
                "dataset, or declare the scheme: sampling=\"poisson\" if every example is in each batch "
                "independently with probability q = B/N, sampling=\"fixed\" for any other batches (no "
                "amplification; docs/privacy.md, \"Sampling schemes\")")

    def train_on_batch(self, x, y=None, *args, **kwargs):
        """Keras `train_on_batch`: one private step on the batch given, accounted as a fixed batch
        (a Gaussian at half the noise multiplier, no amplification by sampling: docs/privacy.md,
        "Sampling schemes"); refused once `max_epsilon` is spent."""
        if self.dp_config is not None and self.dp_config.private:
            if self.engine is None:
                self.prepare(_peek(x, y)[1])
            if self.max_epsilon is not None and self.ledger.steps_within(self.max_epsilon, self.delta,
                                                                          self.accountant) < 1:
                raise BudgetExhausted(f"train_on_batch: {self.budget_name}={self.max_epsilon:g}: one more step on a fixed "
                                      f"batch would exceed the budget (spent: epsilon = {self.epsilon():.4g})")
        return super().train_on_batch(x, y, *args, **kwargs)

    def progress_bar(self):
        """The progress bar `fit` adds after the privacy callback."""
        return keras.callbacks.ProgbarLogger(count_mode="steps")

    @property
    def metrics(self):
        return list(self.dp_state.trackers.values())

    # -- the step -----------------------------------------------------------------------------------
    def loss_fn(self, x, layout: BatchLayout) -> LossTerms:
        """The engine's loss: the training-mode loss terms of one batch (a subclass's `loss_terms` as
        AutoGraph runs it: tfpriv's own code is left as written, `tfpriv.compat.converted`)."""
        return converted(self.loss_terms)(x, layout, training=True)

    def train_step(self, data):
        # One step of the loss stream: each example's draws are keyed by (step, draw, its slot).
        with in_step(self.rng):
            grads, logs = self.engine.gradients(self.loss_fn, converted(self.private_inputs)(data))
            self.optimizer.apply_gradients(zip(grads, self.engine.variables))
            if self.dp_config.private:
                self.ledger.steps.assign_add(1)  # one Poisson-sampled Gaussian per step
            self.step_count.assign_add(1)
            logs.update(converted(self.after_private_step)())
        logs = self.step_logs(logs)
        for name, tracker in self.dp_state.trackers.items():
            value = logs.get(name)
            if isinstance(value, tuple):
                tracker.update_state(value[0], sample_weight=value[1])
            elif value is not None:
                tracker.update_state(value)
        return {name: t.result() for name, t in self.dp_state.trackers.items()}


class DPModel(DPTraining, keras.Model):
    """Base class for models trained through `tfpriv.privacy`: a family implements `term_spec()` and
    `loss_terms(x, layout, training)`; `compile(dp=...)` and `fit` privatize its gradient and
    account its steps (`epsilon()`, `history.history["epsilon"]`).

    Example:
        The VAE family is a `DPModel`:

        >>> import numpy as np
        >>> import tfpriv
        >>> from tfpriv.privae.architectures import build_architecture
        >>> from tfpriv.privae.vae import VAE
        >>> vae = VAE(*build_architecture("mlp", [12], 3))
        >>> vae.compile("adam", dp=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1,
        ...                                        expected_batch_size=8, num_partitions=1),
        ...             num_examples=64, delta=1e-3)
        >>> x = (np.random.default_rng(0).random((64, 12)) > 0.5).astype("float32")
        >>> history = vae.fit(x, epochs=1, verbose=0, seed=0)  # Poisson batches of expected size 8
        >>> vae.ledger.total_steps, round(vae.epsilon(), 2)
        (8, 1.94)
    """


def _is_arrays(x) -> bool:
    if isinstance(x, dict):  # named inputs: {"image": ..., "label": ...}
        return bool(x) and all(isinstance(a, (np.ndarray, tf.Tensor)) for a in x.values())
    return isinstance(x, (np.ndarray, tf.Tensor, list)) or (
        isinstance(x, tuple) and all(isinstance(a, (np.ndarray, tf.Tensor)) for a in x))


def _as_arrays(value):
    """numpy arrays in the structure Keras reads: a dict of arrays is named inputs, a tuple/list of
    arrays several inputs (or targets), anything else one array."""
    if isinstance(value, dict):
        return {k: np.asarray(a) for k, a in value.items()}
    if isinstance(value, (tuple, list)) and value and all(isinstance(a, (np.ndarray, tf.Tensor)) for a in value):
        return tuple(np.asarray(a) for a in value)
    return np.asarray(value)


def _is_iterator(x) -> bool:
    return hasattr(x, "__next__") and not isinstance(x, tf.data.Dataset)


def _peek(x, y):
    """(x as `fit` will read it, its first batch): a generator's first batch is put back."""
    if _is_iterator(x):
        first = next(x)
        return itertools.chain([first], x), first
    if isinstance(x, tf.data.Dataset):
        return x, next(iter(x))
    if _is_arrays(x):
        first = tf.nest.map_structure(lambda a: tf.convert_to_tensor(np.asarray(a)[:8]), x)
        return x, first if y is None else (first, tf.convert_to_tensor(np.asarray(y)[:8]))
    raise ConfigError(f"x: expected arrays, a tf.data.Dataset or a generator of batches, got {type(x).__name__}")
