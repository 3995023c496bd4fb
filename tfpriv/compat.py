"""Keras 2 for tfpriv on any supported TensorFlow: `from tfpriv.compat import keras`.

tfpriv is written against the Keras 2 API. TensorFlow 2.15's `tf.keras` is Keras 2; from
TensorFlow 2.16 on, `tf.keras` is Keras 3 and Keras 2 is the separate `tf_keras` package (same
version as TensorFlow). This module imports the right one directly, so tfpriv never reads or sets
`TF_USE_LEGACY_KERAS`, and the user's `tf.keras` and `keras` (Keras 3) stay what they were.
"""
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

__all__ = ["keras"]
