"""Shared test fixtures: where the real data lives, quiet TensorFlow, fixed seeds."""
import contextlib
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Property tests are deterministic and have no deadline (TF calls vary in time): the same examples
# on every run, no example database written into the checkout. Tests set their own max_examples.
settings.register_profile("tfpriv", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("tfpriv")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def script_env() -> dict[str, str]:
    """The environment of a test script run as its own process (tests/*/scripts/): the repository
    importable, TensorFlow quiet, and Keras 2 only where it is `tf_keras` beside Keras 3, as the command
    line loads it (`tfpriv.cli.launch`; `import tensorflow` would otherwise also load Keras 3, about 1.3 s)."""
    from tfpriv.cli.launch import keras2_is_tf_keras
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO_ROOT))
    if keras2_is_tf_keras():
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def shared_data_dir() -> pathlib.Path:
    """`$TFPRIV_DATA_DIR`, else `../shared/data` beside the repository (as in CI)."""
    env = os.environ.get("TFPRIV_DATA_DIR")
    return pathlib.Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.fail(f"real data not found at {path}; set TFPRIV_DATA_DIR")
    return path


@pytest.fixture(autouse=True)
def _seed():
    # Imported here, not at the top: pytest-xdist's controller loads this file but runs no test, and
    # TensorFlow's start-up lines from its import would be printed after the summary.
    import tensorflow as tf
    tf.random.set_seed(0)
    np.random.seed(0)
    yield


@contextlib.contextmanager
def saved_flags(**overrides):
    """`absl.testing.flagsaver.flagsaver(**overrides)` for tfpriv's own FlagValues (flagsaver knows only
    absl's FLAGS): every tfpriv flag restored afterwards."""
    from absl.testing import flagsaver

    from tfpriv.cli.flags import FLAGS
    saved = flagsaver.save_flag_values(FLAGS)
    try:
        for name, value in overrides.items():
            setattr(FLAGS, name, value)
        yield FLAGS
    finally:
        flagsaver.restore_flag_values(saved, FLAGS)


# The fast tier, `pytest -m "not slow"`: what a developer runs on every change (the engine, its rules,
# accounting, config, data, CLI parsing, the import graph and the records' checks). Every other test
# (trainings of a family, whole runs, processes started) is marked slow; CI runs both. A test in a
# fast module that is slow itself carries `@pytest.mark.slow`.
FAST = ("tests/privacy/", "tests/data/", "tests/metrics/", "tests/experiments/", "tests/cli/test_fuzz_flags.py",
        "tests/test_architecture.py", "tests/test_api_docs.py", "tests/test_compat.py")
# Slow tests inside the fast modules (node-id prefixes): processes, whole trainings, big models, the
# largest parametrizations; each measured at 20 s or more of a loaded worker (--durations).
SLOW_IN_FAST = (
    "tests/privacy/test_distributed.py",                      # processes with logical devices
    "tests/privacy/rules/test_layer_fallback.py::test_recurrent_layers_are_one_unit_of_the_per_layer_fallback",
    "tests/privacy/rules/test_einsum_dense.py::test_multi_head_attention_trains",
    "tests/privacy/test_nonfinite.py::test_bad_example_is_dropped_counted_and_bounded",
    "tests/privacy/test_nonfinite.py::test_conv_ghost_norms_of_an_extreme_example_match_the_jacobian_path",
    "tests/privacy/test_engine.py::test_termwise_clipped_sums_match_naive_loop[layers-called-twice",
    "tests/metrics/test_eval_classifier.py", "tests/metrics/test_dpimagebench.py",
    "tests/metrics/test_resnet.py::test_parameter_count_matches_the_source",
    "tests/cli/test_fuzz_flags.py::test_a_real_process_prints_one_line_and_no_traceback",
    "tests/test_compat.py::test_importing_tfpriv_leaves_the_users_keras_alone",
)
SLOW_NAMES = ("test_make_private_trains_",)  # a rule's end-to-end make_private training


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = pathlib.Path(str(item.fspath)).resolve().relative_to(REPO_ROOT).as_posix()
        node = path + "::" + item.name
        if (not path.startswith(FAST) or node.startswith(SLOW_IN_FAST) or path.startswith(SLOW_IN_FAST)
                or item.name.startswith(SLOW_NAMES)):
            item.add_marker(pytest.mark.slow)
