"""`make_private`: DP-SGD for a user's own Keras model in one call (cf. Opacus' `make_private`).

    dp_model = tfpriv.make_private(keras_model, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                   config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
                                   num_examples=len(x_train), batch_size=64, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x_train, y_train, epochs=2)    # history.history["epsilon"]
    dp_model.save("m.keras")                              # keras_model itself, with its privacy statement
    dp_model = tfpriv.load_private("m.keras", ...)        # continue training: epsilon continues

A Keras 3 model (`import keras`) gets a Keras 3 model back (`tfpriv.training.keras3`).
`loss` is a Keras loss name, a `keras.losses.Loss` (any reduction: a copy with reduction "none"
is used) or a function `(y_true, y_pred)` returning one value per example. Out-of-range class
labels are dropped like non-finite examples (`class_labels`; docs/privacy.md, "Non-finite and
extreme examples"). The wrapped model's loss is one sample-wise term, so each example's gradient
is clipped at C and the sum noised with std zC (DP-SGD); the engine's ghost-norm rules make it
one backward pass for Dense and Conv layers.
"""
from __future__ import annotations

import json
import os
import zipfile

from tfpriv.compat import is_keras3, keras, keras3
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import PrivacyLedger, Segment
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.statement import read_statement, statement_segments
from tfpriv.privacy.terms import TermSpec
from tfpriv.training.dp_model import DPModel
from tfpriv.training.private_training import LossLike, PrivateTraining


class PrivateModel(PrivateTraining, DPModel):
    """A Keras model trained with DP-SGD on a per-example loss; batches are (x, y). Made by
    `make_private`, which also checks the settings and calibrates the noise.

    Example:
        >>> import tfpriv
        >>> from tfpriv.compat import keras
        >>> model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)])
        >>> dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...                                tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
        ...                                num_examples=256, batch_size=32, delta=1e-3)
        >>> isinstance(dp_model, tfpriv.PrivateModel), dp_model.model is model
        (True, True)
    """


def make_private(model: keras.Model, loss: LossLike, config: DPConfig, num_examples: int,
                 batch_size: int, delta: float | None = None, max_epsilon: float | None = None,
                 target_epsilon: float | None = None, epochs: int | None = None) -> PrivateTraining:
    """Wraps `model` for DP-SGD with `config` at expected batch size `batch_size` over `num_examples`.

    `model` is a Keras 2 (tf-keras) or a Keras 3 (`import keras`) model; the result is a model of the
    same Keras (`PrivateModel`, or `tfpriv.training.keras3.PrivateModel`) trained by the same engine.
    Its ledger starts at zero: to continue training a model a private model saved, use `load_private`.

    With `target_epsilon` (and `epochs`) the noise multiplier is calibrated by the RDP accountant
    for that many epochs of Poisson-sampled steps instead of taken from `config`, and the target is
    the budget: `fit` stops before a step would exceed it (or `max_epsilon`, if smaller), however
    many epochs it is asked for, and says so in one line.

    Example:
        >>> import numpy as np
        >>> import tfpriv
        >>> from tfpriv.compat import keras
        >>> x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
        >>> y = (x[:, 0] > 0).astype("int32")
        >>> model = keras.Sequential([keras.layers.Input([4]), keras.layers.Dense(2)])
        >>> dp_model = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...                                tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0),
        ...                                num_examples=256, batch_size=32, delta=1e-3, target_epsilon=2.0, epochs=2)
        >>> dp_model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
        >>> history = dp_model.fit(x, y, epochs=2, verbose=0, seed=0)
        >>> history.history["epsilon"][-1] <= 2.0
        True
    """
    return _private(model, loss, config, num_examples, batch_size, delta, max_epsilon, target_epsilon, epochs, [])


def load_private(filepath: str, loss: LossLike, config: DPConfig, num_examples: int, batch_size: int,
                 delta: float | None = None, max_epsilon: float | None = None, target_epsilon: float | None = None,
                 epochs: int | None = None, prior_privacy: str | None = None,
                 custom_objects: dict | None = None) -> PrivateTraining:
    """The model a private model saved to `filepath` (`.keras`), wrapped as `make_private` wraps one, its
    ledger continuing the one in the file's privacy statement: epsilon counts every step since the start.

    A file without a statement (saved by plain Keras) holds weights whose privacy cost is unknown:
    it is refused unless `prior_privacy="none"` says they were never trained on private data (the
    ledger then starts at zero). `delta` defaults to the statement's. With `target_epsilon`, `epochs`
    counts every epoch since the start (as a resumed run does) and the noise is calibrated for the
    remaining steps; a noise multiplier that changes so is said in one line. Other arguments: `make_private`'s.

    Example:
        dp_model.save("m.keras")                              # a make_private model, after some fit
        dp_model = tfpriv.load_private("m.keras", loss, config, num_examples=len(x), batch_size=64)
        dp_model.compile("adam")
        dp_model.fit(x, y, epochs=1)                          # epsilon continues from the saved ledger
    """
    if prior_privacy not in (None, "none"):
        raise ConfigError(f"prior_privacy: must be None or \"none\" (the weights never saw private data), "
                          f"got {prior_privacy!r}")
    if not os.path.exists(filepath):
        raise ConfigError(f"filepath: {filepath} does not exist")
    statement = read_statement(filepath)
    known = statement is not None and statement.get("dp")
    if not known and prior_privacy is None:
        what = "carries no privacy statement" if statement is None else "was trained without differential privacy"
        raise ConfigError(f"prior_privacy: {filepath} {what}, so what its weights already cost is unknown; give "
                          "prior_privacy=\"none\" if they were never trained on private data (epsilon then counts "
                          "from zero), or load the .keras file a private model's save wrote")
    if known and prior_privacy is not None:
        raise ConfigError(f"prior_privacy: {filepath} carries a privacy statement (epsilon "
                          f"{statement['epsilon']} at delta = {statement['delta']:g}), which the ledger continues; "
                          "give no prior_privacy")
    history = statement_segments(statement) if known else []
    if known and delta is None:
        delta = statement["delta"]
    model = _keras_of_file(filepath).models.load_model(filepath, compile=False, custom_objects=custom_objects)
    return _private(model, loss, config, num_examples, batch_size, delta, max_epsilon, target_epsilon, epochs, history)


def _keras_of_file(filepath: str):
    """The Keras that wrote the `.keras` file (its metadata.json's keras_version): Keras 3 or Keras 2."""
    version = ""
    if zipfile.is_zipfile(filepath):
        with zipfile.ZipFile(filepath) as archive:
            if "metadata.json" in archive.namelist():
                version = str(json.loads(archive.read("metadata.json")).get("keras_version", ""))
    if not version.startswith("3."):
        return keras
    if keras3() is None:
        raise ConfigError(f"filepath: {filepath} was saved by Keras {version}; import keras before loading it")
    return keras3()


def _private(model: keras.Model, loss: LossLike, config: DPConfig, num_examples: int, batch_size: int,
             delta: float | None, max_epsilon: float | None, target_epsilon: float | None, epochs: int | None,
             history: list[Segment]) -> PrivateTraining:
    """`make_private` of a model whose ledger already holds `history`."""
    from tfpriv.training.runner import plan_privacy
    refuse_mixed_precision(model)
    if not config.private:
        raise ConfigError(f"config.aggregation: make_private needs a private mode, got {config.aggregation!r}")
    if config.aggregation not in ("micro", "termwise"):
        raise ConfigError(f"config.aggregation: a per-example loss is clipped per example (micro), got {config.aggregation!r}")
    if (target_epsilon is None) != (epochs is None):
        raise ConfigError("target_epsilon, epochs: give both (to calibrate the noise) or neither")
    plan = plan_privacy(config, TermSpec(sample=("loss",)), num_examples, batch_size, epochs or 1,
                        delta=delta, target_epsilon=target_epsilon, max_epsilon=max_epsilon, history=history)
    change = plan.noise_change()
    if change:
        print(change, flush=True)
    # A target the user gave is a budget, as max_epsilon is: the smaller of the two stops training.
    budget, name = max_epsilon, "max_epsilon"
    if target_epsilon is not None and (max_epsilon is None or target_epsilon < max_epsilon):
        budget, name = target_epsilon, "target_epsilon"
    private_class = PrivateModel
    if is_keras3(model):  # a model of `import keras` gets a model of the same Keras
        from tfpriv.training.keras3 import PrivateModel as private_class
    dp_model = private_class(model, loss, plan.config, num_examples, plan.delta, budget)
    dp_model.budget_name = name
    if history:
        ledger = PrivacyLedger()
        for q, noise, steps in history:  # each saved segment, in order; compile begins the next one
            ledger.begin(q, noise)
            ledger.steps.assign(steps)
        dp_model.dp_state.ledger = ledger
    return dp_model


def refuse_mixed_precision(model: keras.Model) -> None:
    """Raises ConfigError naming `model` when a layer computes in float16 or bfloat16 (a mixed-precision
    dtype policy, e.g. from `keras.mixed_precision.set_global_policy("mixed_float16")`).

    The engine's per-example norms, clip factors, sums and noise are computed in the variables' one
    dtype (float32 or float64); a half-precision forward pass with float32 variables crashed `fit`
    (float32 + float16). Supporting it would need every DP quantity cast to float32 and a sensitivity
    test per policy.
    """
    half = [layer for layer in model._flatten_layers() if str(layer.compute_dtype) in ("float16", "bfloat16")]
    if half:
        # Named: the first layer with weights of its own (not a model holding them).
        layer = next((layer for layer in half if layer.weights and not list(layer._flatten_layers(include_self=False))),
                     half[0])
        policy = getattr(layer.dtype_policy, "name", layer.compute_dtype)
        raise ConfigError(f"model: layer {layer.name!r} computes in {layer.compute_dtype} (dtype policy {policy!r}); "
                          "make_private needs float32: build the model after "
                          "keras.mixed_precision.set_global_policy(\"float32\")")
