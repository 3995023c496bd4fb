"""tfpriv: differentially private generative modelling in TensorFlow/Keras.

Top level: `DPConfig` (how a loss is privatized), `make_private` (DP-SGD for your own Keras
model; `fix_model`/`validate_model` make it clippable per example, replacing BatchNormalization;
`load_private` continues one a private model saved, its epsilon continuing),
`DPModel` (the base of every private model family), `load` (the trained model of a
run folder; its SavedModel export is `OUTPUT_DIR/saved_model`, see `tfpriv.export`), `synthesizer`
(private synthetic data from arrays: fit, sample, save; `tfpriv.synthesizer`).

They are imported on first use (PEP 562), so that `import tfpriv.cli.launch` does not load
TensorFlow: the command line installs its Ctrl-C handler before that slow import. Library use is as
quiet as the command line (`tfpriv.tf_logs.quiet_library`: TensorFlow's start-up and C++ log lines
and its Python warnings inside tfpriv's calls follow TF_CPP_MIN_LOG_LEVEL, 3 unless set).
"""
import importlib

from tfpriv import tf_logs

tf_logs.quiet_library()

__version__ = "0.1.0"

# name -> module defining it
_EXPORTS = {
    "DPConfig": "tfpriv.privacy.config",
    "load": "tfpriv.trained",
    "DPModel": "tfpriv.training.dp_model",
    "PrivateModel": "tfpriv.training.private_model",
    "fix_model": "tfpriv.training.model_fix",
    "validate_model": "tfpriv.training.model_fix",
    "make_private": "tfpriv.training.private_model",
    "load_private": "tfpriv.training.private_model",
    "synthesizer": "tfpriv.synthesizer",
}

__all__ = ["DPConfig", "DPModel", "PrivateModel", "fix_model", "load", "load_private", "make_private", "synthesizer",
           "validate_model", "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfpriv' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
