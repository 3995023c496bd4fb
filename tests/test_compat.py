"""`tfpriv.compat.keras` is Keras 2 on every supported TensorFlow, and importing tfpriv leaves the
user's `tf.keras` and `keras` as they would be without it."""
import importlib.metadata
import json
import os
import subprocess
import sys
import types

import tensorflow as tf

from tests.conftest import REPO_ROOT
from tfpriv.compat import KERAS3_TF, keras, keras3, keras_classes, keras_modules, tf_version
from tools.use_compat_keras import TF_KERAS, python_files

# Prints what a program sees as tf.keras and keras after importing TensorFlow (and tfpriv if asked).
PROBE = r"""
import json, os, sys
import tensorflow as tf
if sys.argv[1] == "tfpriv":
    import tfpriv
try:
    import keras
    user_keras = [keras.__name__, keras.__version__]
except ImportError:
    user_keras = None
print(json.dumps({"tf.keras.Model": f"{tf.keras.Model.__module__}.{tf.keras.Model.__name__}",
                  "keras": user_keras, "TF_USE_LEGACY_KERAS": os.environ.get("TF_USE_LEGACY_KERAS")}))
"""


def probe(import_tfpriv: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", PROBE, "tfpriv" if import_tfpriv else "-"], env=env,
                         capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_keras_is_keras_2():
    # TF 2.15's tf.keras is the keras 2.15 package, whose API module has no __version__.
    version = keras.__version__ if tf_version() >= KERAS3_TF else importlib.metadata.version("keras")
    assert version.startswith("2.")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert model(tf.zeros((1, 3))).shape == (1, 2)


def test_importing_tfpriv_leaves_the_users_keras_alone():
    assert probe(import_tfpriv=True) == probe(import_tfpriv=False)


def test_no_tf_keras_outside_compat():
    """tfpriv's code and tests use Keras 2 through `tfpriv.compat` only: a `tf.keras` left anywhere
    is Keras 3 on TF >= 2.16 and mixes two Keras versions (fix: `python tools/use_compat_keras.py`)."""
    offenders = [str(f) for f in python_files(REPO_ROOT) if TF_KERAS.search((REPO_ROOT / f).read_text())]
    assert offenders == []


def test_keras3_is_the_users_keras_3_module_only(monkeypatch):
    """`keras3()` never imports: it is the loaded `keras` module if that is Keras 3 (None for Keras 2,
    TF 2.15's `keras`, or nothing loaded), and `keras_classes` adds its class to Keras 2's."""
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    assert keras3() is None and keras_classes("layers.Dense") == (keras.layers.Dense,)
    fake = types.SimpleNamespace(__version__="3.99.0", layers=types.SimpleNamespace(Dense=type("Dense", (), {})))
    monkeypatch.setitem(sys.modules, "keras", fake)
    assert keras3() is fake and keras_classes("layers.Dense") == (keras.layers.Dense, fake.layers.Dense)
    assert keras_classes("layers.NoSuchLayer") == ()
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="2.15.0"))
    assert keras3() is None and keras_modules() == (keras,)
