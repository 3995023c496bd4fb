"""tfpriv: differentially private generative modelling in TensorFlow/Keras.

Top level: `DPConfig` (how a loss is privatized), `make_private` (DP-SGD for your own Keras
model; `fix_model`/`validate_model` make it clippable per example, replacing BatchNormalization),
`DPModel` (the base of every private model family), `load` (the trained model of a
run folder; its SavedModel export is `OUTPUT_DIR/saved_model`, see `tfpriv.export`).
"""

__version__ = "0.1.0"

from tfpriv.privacy.config import DPConfig  # noqa: E402
from tfpriv.trained import load  # noqa: E402
from tfpriv.training.dp_model import DPModel  # noqa: E402
from tfpriv.training.model_fix import fix_model, validate_model  # noqa: E402
from tfpriv.training.private_model import PrivateModel, make_private  # noqa: E402

__all__ = ["DPConfig", "DPModel", "PrivateModel", "fix_model", "load", "make_private", "validate_model",
           "__version__"]
