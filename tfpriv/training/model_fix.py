"""`fix_model` and `validate_model`: make a user's Keras model clippable per example (cf. Opacus'
`ModuleValidator.fix` / `validate`).

DP-SGD clips each example's gradient, so example i's loss must depend on example i alone, and
nothing the model keeps may be learnt from the data outside the noised gradient. A trainable
`BatchNormalization` breaks both: in training it normalises every example with statistics of
the whole batch, and it updates its moving mean and variance from those statistics (saved with
the model, never noised). `fix_model` replaces it by `GroupNormalization`, which normalises each
example on its own. Groups: 32 (Wu & He's default) or, when the channel count C is not a
multiple of 32, the largest divisor of C below 32 (GroupNormalization needs C divisible by the
number of groups; C = 3 gives 3 groups of one channel, a prime C > 32 one group: layer
normalisation over the channels).

Keras 2 and Keras 3 models alike: the replacement is the model's own Keras' GroupNormalization.

A frozen BatchNormalization (`trainable=False`) runs in inference mode in keras, normalising
with its fixed moving statistics and updating nothing, so it is per-example and left as it is.
"""
from __future__ import annotations


from tfpriv.compat import is_keras3, keras, keras_classes, keras_of
from tfpriv.errors import ConfigError
from tfpriv.privacy.taps import clipping_problems

MAX_GROUPS = 32
Layer = keras.layers.Layer


def groups_for(channels: int) -> int:
    """The largest divisor of `channels` that is at most `MAX_GROUPS`."""
    return max(g for g in range(1, min(channels, MAX_GROUPS) + 1) if channels % g == 0)


def _is_batch_norm(layer: Layer) -> bool:
    return isinstance(layer, keras_classes("layers.BatchNormalization"))


def _rebuildable(model: Layer) -> bool:
    """A Sequential or functional model of either Keras (Keras can clone it; a subclassed one it cannot)."""
    return (isinstance(model, keras_classes("Sequential")) or getattr(model, "_is_graph_network", False)
            or (is_keras3(model) and hasattr(model, "operations")))  # Keras 3's functional models: their graph


def _layers(model: Layer) -> list[Layer]:
    return [model] + list(model._flatten_layers(include_self=False, recursive=True))


def validate_model(model: keras.Model) -> list[str]:
    """The reasons `model` cannot be trained with per-example clipping, one per problem, each naming
    its layer (empty: none found). The engine's first-batch check (`DPGradientEngine.verify`)
    remains the final word: it also catches what no layer type reveals (e.g. a loss mixing examples).

    Example:
        >>> import tfpriv
        >>> from tfpriv.compat import keras
        >>> model = keras.Sequential([keras.layers.Input([8, 8, 3]), keras.layers.Conv2D(4, 3),
        ...                           keras.layers.BatchNormalization(), keras.layers.Flatten(), keras.layers.Dense(2)])
        >>> len(tfpriv.validate_model(model)), tfpriv.validate_model(tfpriv.fix_model(model))
        (1, [])"""
    return clipping_problems([model], model.trainable_variables)


def _group_norm(bn: keras.layers.BatchNormalization) -> Layer:
    """A GroupNormalization with `bn`'s axis, epsilon, centring, scaling, initializers, regularizers,
    constraints and dtype; its weights are fresh (gamma = 1, beta = 0 with the default initializers)."""
    config = bn.get_config()
    axis = config["axis"]
    axis = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else axis
    if not isinstance(axis, int) or not bn.built:
        return bn  # a multi-axis or unbuilt BatchNormalization: left for validate_model to report
    channels = int(bn.moving_mean.shape[0])
    keys = ("epsilon", "center", "scale", "beta_initializer", "gamma_initializer", "beta_regularizer",
            "gamma_regularizer", "beta_constraint", "gamma_constraint", "dtype")
    return keras_of(bn).layers.GroupNormalization(groups=groups_for(channels), axis=axis,
                                                  name=f"{bn.name}_group_norm", **{k: config[k] for k in keys})


def _clone(model: keras.Model, copies: list[tuple[Layer, Layer]]) -> keras.Model:
    """`model` rebuilt with trainable BatchNormalization replaced (nested Sequential/functional models
    too); every other layer is a fresh copy whose weights are copied from its original afterwards."""

    def clone_layer(layer: Layer) -> Layer:
        if _is_batch_norm(layer) and layer.trainable:
            new = _group_norm(layer)
            if new is not layer:
                return new
        if _rebuildable(layer):
            return _clone(layer, copies)
        new = layer.__class__.from_config(layer.get_config())
        copies.append((layer, new))
        return new

    return keras_of(model).models.clone_model(model, clone_function=clone_layer)


def fix_model(model: keras.Model) -> keras.Model:
    """An equivalent Sequential or functional model with every trainable BatchNormalization replaced
    by a GroupNormalization (groups: see the module docstring); raises ConfigError listing, one per
    layer, whatever else `validate_model` finds.

    The replacements' weights are fresh: gamma = 1 and beta = 0 (the BatchNormalization's own
    initializers), not its learnt scale and shift, and no moving statistics are kept. Every other
    layer keeps its weights (copied: training the fixed model leaves `model` as it was). `model`
    itself is returned when it has nothing to replace.

    Example:
        >>> import tfpriv
        >>> from tfpriv.compat import keras
        >>> model = keras.Sequential([keras.layers.Input([8, 8, 3]), keras.layers.Conv2D(4, 3),
        ...                           keras.layers.BatchNormalization(), keras.layers.Flatten(), keras.layers.Dense(2)])
        >>> [type(layer).__name__ for layer in tfpriv.fix_model(model).layers]
        ['Conv2D', 'GroupNormalization', 'Flatten', 'Dense']
    """
    if not any(_is_batch_norm(layer) and layer.trainable for layer in _layers(model)):
        fixed = model
    elif not _rebuildable(model):
        fixed = model  # subclassed: Keras cannot rebuild it; validate_model reports its BatchNormalization
    else:
        copies: list[tuple[Layer, Layer]] = []
        fixed = _clone(model, copies)
        for original, copy in copies:
            if original.weights:
                copy.set_weights(original.get_weights())
    problems = validate_model(fixed)
    if problems:
        raise ConfigError(f"model: cannot be trained privately: {'; '.join(problems)}")
    return fixed
