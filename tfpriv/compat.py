"""Keras 2 for tfpriv on any supported TensorFlow: `from tfpriv.compat import keras`.

tfpriv is written against the Keras 2 API. TensorFlow 2.15's `tf.keras` is Keras 2; from
TensorFlow 2.16 on, `tf.keras` is Keras 3 and Keras 2 is the separate `tf_keras` package (same
version as TensorFlow). This module imports the right one directly, so the library never reads or sets
`TF_USE_LEGACY_KERAS`, and the user's `tf.keras` and `keras` (Keras 3) stay what they were (the command
line's own process sets it, `tfpriv.cli.launch`).

A user's model may also be a Keras 3 model (`import keras`, TensorFlow backend). tfpriv never imports
Keras 3 itself: `keras3()` is the module only once the user has imported it (a Keras 3 model cannot
exist before), and `keras_classes` is the one place where type checks learn both Kerases' classes.
"""
from __future__ import annotations

import sys

import tensorflow as tf

# TF 2.16 is the first release whose tf.keras is Keras 3.
KERAS3_TF = (2, 16)


def tf_version() -> tuple[int, int]:
    """TensorFlow's (major, minor) version."""
    major, minor = tf.__version__.split(".")[:2]
    return int(major), int(minor)


if tf_version() >= KERAS3_TF:
    try:
        import tf_keras as keras
    except ImportError as e:  # the message names the fix: tf-keras of the same version as TF
        raise ImportError(f"tfpriv needs Keras 2 on TensorFlow {tf.__version__}: "
                          f"pip install tf-keras~={'.'.join(map(str, tf_version()))}.0") from e
else:
    keras = tf.keras



def _leave_tfpriv_to_autograph_as_written() -> None:
    """AutoGraph leaves tfpriv's modules as written, as it leaves TensorFlow's and Keras' (tfpriv's
    control flow on tensors is TensorFlow ops already): converting the engine, the rules and the
    families was most of the first trace of a private step (a transformer's 12.0 s of which 9 s were
    AutoGraph's; bench/profile_step.py). What a user passes in is still converted where tfpriv calls it
    (`converted`). TensorFlow has no public API for its list of modules not to convert."""
    from tensorflow.python.autograph.core import config, config_lib
    if not any(isinstance(r, config_lib.DoNotConvert) and r.matches("tfpriv") for r in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (config_lib.DoNotConvert("tfpriv"), *config.CONVERSION_RULES)


_leave_tfpriv_to_autograph_as_written()


def converted(fn):
    """`fn` as AutoGraph would run it inside the tf.function tracing this call: a user's loss, layer or
    family method (a Python `if` on a tensor becomes a tf.cond); tfpriv's own code unchanged."""
    return tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx())


def keras3():
    """The Keras 3 module if the user has imported it, else None; imports nothing. (On TensorFlow 2.15
    `keras` is Keras 2, the same module as `tf.keras`.)"""
    module = sys.modules.get("keras")
    return module if str(getattr(module, "__version__", "")).startswith("3.") else None


def keras_modules() -> tuple:
    """Keras 2 and, once imported, Keras 3."""
    k3 = keras3()
    return (keras,) if k3 is None else (keras, k3)


def keras_classes(path: str) -> tuple[type, ...]:
    """The class at `path` ("layers.Dense", "Model") in Keras 2 and, once imported, in Keras 3."""
    found = []
    for module in keras_modules():
        obj = module
        for name in path.split("."):
            obj = getattr(obj, name, None)
        if isinstance(obj, type):
            found.append(obj)
    return tuple(found)


def is_keras3(obj) -> bool:
    """Whether `obj` is a Keras 3 layer or model."""
    k3 = keras3()
    return k3 is not None and isinstance(obj, k3.layers.Layer)


def keras_of(obj):
    """The Keras module of the layer or model `obj`: Keras 3 for a Keras 3 one, else Keras 2."""
    return keras3() if is_keras3(obj) else keras


__all__ = ["is_keras3", "keras", "keras3", "keras_classes", "keras_modules", "keras_of"]
