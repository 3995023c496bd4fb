"""`make_private` for a Keras 3 model (`import keras`, TensorFlow backend): a Keras 3 model back.

The training logic is Keras-independent (`DPTraining`, `PrivateTraining`: the one engine, ledger,
Poisson sampling, first-batch verification); this module only mixes it into Keras 3's `Model` and
says where Keras 3 keeps what Keras 2 names differently (compiled metrics, the progress bar).
Imported by `make_private` when it is given a Keras 3 model, so Keras 3 is loaded by then.
"""
from __future__ import annotations

from tfpriv.compat import keras3
from tfpriv.training.private_training import PrivateTraining

keras = keras3()
if keras is None:
    raise ImportError("tfpriv.training.keras3 needs Keras 3 imported first (`import keras` on TensorFlow >= 2.16)")


class PrivateModel(PrivateTraining, keras.Model):
    """`PrivateTraining` for a Keras 3 model: `fit` reports epsilon, `save`/`export` write the wrapped model."""

    keras_module = keras

    def compile(self, optimizer="adam", metrics=None, **kwargs):
        """Keras compile; the privacy settings are those given to `make_private`. No XLA by default
        (`jit_compile=False`, Keras 2's default): the engine's step is not written for it."""
        kwargs.setdefault("jit_compile", False)
        super().compile(optimizer=optimizer, metrics=metrics, **kwargs)

    def compiled_metrics_container(self):
        return self._compile_metrics

    def progress_bar(self):
        return keras.callbacks.ProgbarLogger()
