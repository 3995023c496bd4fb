"""Private synthetic data without a training loop: `tfpriv.synthesizer(name, epsilon=..., **settings)`.

A `Synthesizer` runs the family's own command-line job (its registered `Family`, `tfpriv.families`:
`tfpriv/privae/job.py`, `tfpriv/gan/job.py`) on the arrays given to `fit`, not on a named dataset: the same
`TrainingRun` sequence, `plan_privacy` calibrating the noise to `epsilon` at `delta` for the
planned epochs, `fit_private`, the ledger, results.json and the SavedModel export. Only the
dataset-specific evaluation (held-out scores, figures) is left out: the arrays are all private.
The run folder lives in a temporary folder until `save(dir)` copies it.

Settings are the job's settings by their flag names (`epochs`, `batch_size`, `l2_norm_clip`,
`learning_rate`, `architecture`, `capacity`, `seed`, ...), except those that choose a dataset,
set the noise (calibrated from `epsilon`) or configure the evaluation.
"""
from __future__ import annotations

import math
import numbers
import os
import re
import shutil
import tempfile
import weakref

import numpy as np

from tfpriv.errors import ConfigError, UsageError

__all__ = ["Synthesizer", "names", "synthesizer"]

DATASET = "arrays"  # results.json's `dataset` of a synthesizer run
_FLAG = re.compile(r"--(?=[A-Za-z_])")


def names() -> tuple[str, ...]:
    """The synthesizer names: every `--model` name of a family registered with a `Synthesis`.

    Example:
        >>> from tfpriv.synthesizer import names
        >>> names()
        ('privae', 'vae', 'dpwgan_gp', 'dpgan')
    """
    from tfpriv.families import families
    return tuple(name for name, family in families().items() if family.synthesis is not None)


def _library_error(exc: UsageError) -> UsageError:
    """The job's error in the synthesizer's terms: its settings are named as the job's flags, without `--`."""
    return type(exc)(_FLAG.sub("", str(exc)))


def _run_class(job):
    """The job's `TrainingRun` on the synthesizer's arrays: `load` returns them, nothing is scored
    (every array is private, there is no held-out set) and `evaluate` only saves the trained model."""

    class SynthesizerRun(job.training_run):
        def __init__(self, settings, output_dir: str, dataset):
            super().__init__(settings, output_dir)
            self.dataset = dataset

        def check_data_source(self) -> None:
            """A GAN's: `Synthesizer.fit` has checked the arrays' shape and range."""

        def load(self):
            if self.s.seed is not None:
                from tfpriv.compat import keras
                keras.utils.set_random_seed(self.s.seed)
            return self.dataset

        def scorer(self):
            """A GAN's: progress.json records epsilon and the losses per epoch, no scores."""
            return None

        def evaluate(self) -> dict:
            self.save_model()
            self.eval_seconds = 0.0  # a GAN's record reads it
            return {}

    return SynthesizerRun


def _screened(x: np.ndarray, y: np.ndarray | None, num_classes: int | None,
              unit: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(x, y) with every record outside the documented domain made non-finite, so that training
    drops it as it drops any record with a NaN/inf input (the engine's screening, `make_private`'s
    too: clip factor 0, counted in `dropped`, still sampled): values outside [0, 1] when `unit`, a
    label outside [0, num_classes) (then set to 0). A refusal here would depend on one record, a
    release outside epsilon; the schema (shape, dtype) is what `fit` refuses."""
    outside = ~np.all(np.isfinite(x.reshape(len(x), -1)), axis=1)
    if unit:
        with np.errstate(invalid="ignore"):
            outside |= np.any((x < 0) | (x > 1), axis=tuple(range(1, x.ndim)))
    if y is not None:
        bad_label = (y < 0) | (y >= num_classes)
        outside |= bad_label
        y = np.where(bad_label, 0, y)
    if outside.any():
        x = np.where(outside.reshape(-1, *[1] * (x.ndim - 1)), np.float32(np.nan), x)
    return x, y


class Synthesizer:
    """A private generative model trained on arrays and sampled from; made by `tfpriv.synthesizer`.

    Example:
        >>> import tfpriv
        >>> from tfpriv.data import load_dataset
        >>> x = load_dataset("digits").x_train
        >>> s = tfpriv.synthesizer("privae", epsilon=3.0, epochs=1, seed=0).fit(x)
        >>> s.sample(10, seed=1).shape
        (10, 8, 8, 1)
    """

    def __init__(self, name: str, epsilon: float, delta: float | None = None, **settings):
        if name not in names():
            raise ConfigError(f"name: must be one of {', '.join(names())}, got {name!r}")
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not (
                math.isfinite(epsilon) and epsilon > 0):
            raise ConfigError(f"epsilon: must be a positive finite number, got {epsilon!r}")
        self.name, self.target_epsilon, self.target_delta = name, float(epsilon), delta
        from tfpriv.families import family
        from tfpriv.jobs.schema import synthesizer_fields
        self._family = family(name)
        self._job, self._synthesis = self._family.job, self._family.synthesis
        allowed = sorted(set(synthesizer_fields(self._job.settings_type)))
        if self._synthesis.labels:
            allowed.append("num_classes")
        unknown = sorted(set(settings) - set(allowed))
        if "noise_multiplier" in unknown:
            raise ConfigError(f"noise_multiplier: fit calibrates it from epsilon={epsilon!r} (at delta, for the "
                              "planned epochs and batch_size); give epsilon only")
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a setting of the {name} synthesizer; its settings are "
                              f"{', '.join(sorted(allowed))}")
        num_classes = settings.pop("num_classes", 10)
        try:
            self._job.settings(name, **settings)  # each value's type and bounds, now rather than at fit
        except UsageError as exc:
            raise ConfigError(_FLAG.sub("", str(exc))) from None
        if settings.get("aggregation") == "none":
            raise ConfigError("aggregation: a synthesizer trains privately; 'none' has no privacy budget")
        self.num_classes: int | None = None  # a conditional model's number of label values (`fit`'s y)
        if self._synthesis.labels:
            if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
                raise ConfigError(f"num_classes: must be an integer >= 2, got {num_classes!r}")
            self.num_classes = int(num_classes)
        self.settings = {"verbose": 0, **settings}
        self.run_dir: str | None = None  # the run folder once fitted (a temporary folder; `save` copies it)
        self.results: dict | None = None  # results.json of the fit
        self._model = None

    @property
    def epsilon(self) -> float:
        """The epsilon the accountant spent on `fit` (at most the target).

        Example: `s.fit(x); assert s.epsilon <= 3.0`."""
        return float(self._fitted("epsilon")["epsilon"])

    @property
    def delta(self) -> float:
        """The delta of `epsilon` (the given one, or the default power of ten below min(1/N, 1e-5)).

        Example: `s.fit(x); s.delta  # 1e-05 for 1,437 examples`."""
        return float(self._fitted("delta")["delta"])

    def _fitted(self, what: str) -> dict:
        if self.results is None:
            raise UsageError(f"{what}: the synthesizer is not trained yet; call fit(x) first")
        return self.results

    def _dataset(self, x, y):
        from tfpriv.data.dataset import make_dataset
        try:
            x = np.asarray(x, dtype=np.float32)
        except (TypeError, ValueError):
            raise UsageError("x: must be a numeric array, one row per example") from None
        ndims = self._synthesis.ndims
        if x.ndim not in ndims:
            shapes = " or ".join({2: "[N, features]", 4: "images [N, height, width, channels] (any size, e.g. "
                                  "28x28x1, 8x8x1 or 32x32x3)"}.get(n, f"{n}-D") for n in ndims)
            raise UsageError(f"x: a {self.name} synthesizer takes {shapes}, got shape {list(x.shape)}")
        if len(x) < 2:
            raise UsageError(f"x: needs at least 2 examples, got {len(x)}")
        kind = "image" if x.ndim == 4 else "tabular"
        likelihood = "bernoulli" if kind == "image" else "gaussian"  # the data's; a `likelihood` setting wins
        unit = self._synthesis.unit_interval(self.settings, kind)
        labels, num_classes = {}, {}
        if y is not None:
            if not self._synthesis.labels:
                raise UsageError(f"y: the {self.name} synthesizer is unconditional; give no labels")
            y = np.asarray(y)
            if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
                raise UsageError(f"y: must be {len(x)} integer labels (one per row of x), got {y.dtype} "
                                 f"shape {list(y.shape)}")
        x, y = _screened(x, y, self.num_classes, unit)
        if y is not None:
            labels, num_classes = {"label": y}, {"label": self.num_classes}
        return make_dataset(DATASET, x, x[:0], labels, {k: v[:0] for k, v in labels.items()}, kind=kind,
                            likelihood=likelihood, num_classes=num_classes)

    def fit(self, x, y=None) -> "Synthesizer":
        """Trains on `x` (and, for a GAN, integer labels `y`: a conditional GAN) with the noise
        calibrated so that the planned epochs spend `epsilon` at `delta`. Returns the synthesizer.

        Example: `tfpriv.synthesizer("dpwgan_gp", epsilon=1.0, epochs=1).fit(images, labels)`."""
        if self.results is not None:
            raise UsageError("fit: the synthesizer is already trained; make a new one to train again")
        dataset = self._dataset(x, y)
        run_dir = tempfile.mkdtemp(prefix=f"tfpriv-{self.name}-")
        try:
            fields = dict(self.settings, dataset=DATASET, epsilon=self.target_epsilon, delta=self.target_delta)
            if self._synthesis.labels:
                fields[self._synthesis.labels] = y is not None
            settings = self._job.settings(self.name, **fields)
            results = _run_class(self._job)(settings, run_dir, dataset).run()
            self._model = self._family.load(run_dir)
        except UsageError as exc:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise _library_error(exc) from None
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        self.run_dir, self.results = run_dir, results
        weakref.finalize(self, shutil.rmtree, run_dir, True)
        return self

    def sample(self, n: int, seed: int | None = None, labels=None) -> np.ndarray:
        """`n` synthetic examples as a numpy array shaped like a row of x; the same seed gives the
        same samples (also from `tfpriv.load(dir)` and the SavedModel of `save(dir)`). A
        conditional GAN needs `labels`: n integers in [0, num_classes). seed None: from the OS.

        Example: `s.sample(100, seed=0, labels=np.arange(100) % 10)`."""
        if self._model is None:
            raise UsageError("sample: the synthesizer is not trained yet; call fit(x) first")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise UsageError(f"n: must be an integer >= 1, got {n!r}")
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2**31)
        if not self._synthesis.labels:
            if labels is not None:
                raise UsageError(f"labels: the {self.name} synthesizer is unconditional; give no labels")
            return self._model.sample(int(n), seed).numpy()
        return self._model.sample(int(n), seed, labels).numpy()

    def save(self, directory: str) -> str:
        """Writes the run folder to `directory` (new or empty): results.json, the trained model
        (`tfpriv.load(directory)`), `saved_model/` (`tf.saved_model.load`), the privacy plan,
        checkpoints with the ledger and logs. Returns `directory`.

        Example: `s.save("runs/synth"); tfpriv.load("runs/synth").sample(10, seed=0)`."""
        from tfpriv.run_folder import SAVED_MODEL_DIR
        from tfpriv.training.results import write_results
        results = self._fitted("save")
        if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
            raise UsageError(f"directory: {directory} exists and is not an empty folder")
        results = {**results, "saved_model": {**results["saved_model"],
                                              "path": os.path.join(directory, SAVED_MODEL_DIR)}}
        parent = os.path.dirname(os.path.abspath(directory))
        try:  # copied to a temporary folder, renamed into place: no half-written run folder
            os.makedirs(parent, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(directory))}.tmp-", dir=parent)
            try:
                shutil.copytree(self.run_dir, tmp, dirs_exist_ok=True)
                write_results(tmp, results)
                os.replace(tmp, directory)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError as exc:
            raise UsageError(f"directory: cannot write {directory} ({exc.strerror or exc})") from None
        return directory


def synthesizer(name: str, epsilon: float, delta: float | None = None, **settings) -> Synthesizer:
    """A private synthesizer: `name` is "privae", "dpwgan_gp", "dpgan" or another family registered with a
    `Synthesis` (`names()`); `fit(x)` trains it with
    the noise calibrated so that training spends `epsilon` at `delta` (default: the power of ten
    below min(1/N, 1e-5)); `settings` are the job's (`epochs`, `batch_size`, `l2_norm_clip`,
    `learning_rate`, `seed`, ...; a GAN also takes `num_classes` for labelled data).

    Example:
        >>> import tfpriv
        >>> s = tfpriv.synthesizer("privae", epsilon=3.0, epochs=1, seed=0).fit(x)
        >>> samples = s.sample(100, seed=0)
        >>> s.save("runs/synth")  # tfpriv.load("runs/synth") serves the same samples
    """
    return Synthesizer(name, epsilon, delta, **settings)
