"""`make_private`: DP-SGD for a user's own Keras model in one call (cf. Opacus' `make_private`).

    dp_model = tfpriv.make_private(keras_model, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                   config=tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.1),
                                   num_examples=len(x_train), batch_size=64, delta=1e-5)
    dp_model.compile(optimizer="adam", metrics=["accuracy"])
    history = dp_model.fit(x_train, y_train, epochs=2)    # history.history["epsilon"]
    dp_model.save("m.keras")                              # saves keras_model itself

A Keras 3 model (`import keras`) gets a Keras 3 model back (`tfpriv.training.keras3`).
`loss` is a Keras loss name, a `keras.losses.Loss` (any reduction: a copy with reduction "none"
is used) or a function `(y_true, y_pred)` returning one value per example. Out-of-range class
labels are dropped like non-finite examples (`class_labels`; docs/privacy.md, "Non-finite and
extreme examples"). The wrapped model's loss is one sample-wise term, so each example's gradient
is clipped at C and the sum noised with std zC (DP-SGD); the engine's ghost-norm rules make it
one backward pass for Dense and Conv layers.
"""
from __future__ import annotations

from tfpriv.compat import is_keras3, keras
from tfpriv.errors import ConfigError
from tfpriv.privacy.config import DPConfig
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

    With `target_epsilon` (and `epochs`) the noise multiplier is calibrated by the RDP accountant
    for that many epochs of Poisson-sampled steps instead of taken from `config`.

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
    from tfpriv.training.runner import plan_privacy
    refuse_mixed_precision(model)
    if not config.private:
        raise ConfigError(f"config.aggregation: make_private needs a private mode, got {config.aggregation!r}")
    if config.aggregation not in ("micro", "termwise"):
        raise ConfigError(f"config.aggregation: a per-example loss is clipped per example (micro), got {config.aggregation!r}")
    if (target_epsilon is None) != (epochs is None):
        raise ConfigError("target_epsilon, epochs: give both (to calibrate the noise) or neither")
    plan = plan_privacy(config, TermSpec(sample=("loss",)), num_examples, batch_size, epochs or 1,
                        delta=delta, target_epsilon=target_epsilon, max_epsilon=max_epsilon)
    private_class = PrivateModel
    if is_keras3(model):  # a model of `import keras` gets a model of the same Keras
        from tfpriv.training.keras3 import PrivateModel as private_class
    return private_class(model, loss, plan.config, num_examples, plan.delta, max_epsilon)


def refuse_mixed_precision(model: keras.Model) -> None:
    """Raises ConfigError naming `model` when a layer computes in float16 or bfloat16 (a mixed-precision
    dtype policy, e.g. from `keras.mixed_precision.set_global_policy("mixed_float16")`).

    The engine's per-example norms, clip factors, sums and noise are written for the float32
    gradients of a float32 model; a half-precision forward pass crashed `fit` (float32 + float16).
    Supporting it would need every DP quantity cast to float32 and a sensitivity test per policy.
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
