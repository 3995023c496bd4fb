"""Adding a model family is its package plus one registry line: a toy family defined here, outside
tfpriv/, trains through train.py's entry (`tfpriv.cli.main`) with a flag made from its settings,
loads with `tfpriv.load`, serves its SavedModel signature, tunes with `--tune` and, by its `Family`
record's `Synthesis`, is a `tfpriv.synthesizer`, like the built-in families (`tfpriv.families`)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tests.cli.helpers import train_py
from tests.conftest import REPO_ROOT
from tfpriv.compat import keras
from tfpriv.data import load_dataset
from tfpriv.errors import ConfigError, UsageError
from tfpriv.families import Family, families, register
from tfpriv.jobs import job as job_registry
from tfpriv.jobs import schema
from tfpriv.jobs.job import Job, Synthesis
from tfpriv.jobs.schema import PrivateSettings, setting
from tfpriv.jobs.pipeline import Built, TrainingRun
from tfpriv.jobs.serving import N, SEED, Serving, function, seed_pair
from tfpriv.tuning.space import FamilyTuning, Objective
from tfpriv.privacy.terms import LossTerms, TermSpec
from tfpriv.privacy.tuning import TrialCount
from tfpriv.training.dp_model import DPModel

CENTRE_FILE = "toy_centre.npy"
SAMPLE_STD = 0.1


class Toy(DPModel):
    """Learns the data's mean: one sample-wise term, an example's squared distance to the centre."""

    def __init__(self, dim: int, init: float):
        super().__init__()
        self.centre = keras.layers.Dense(dim, use_bias=False, kernel_initializer=keras.initializers.Constant(init))

    def term_spec(self) -> TermSpec:
        return TermSpec(sample=("distance",))

    def loss_terms(self, x, layout, training=True) -> LossTerms:
        centre = self.centre(tf.ones_like(x[:, :1]))
        return LossTerms({"distance": tf.reduce_sum(tf.square(x - centre), axis=1)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToySettings(PrivateSettings):
    aggregation: str = schema.aggregation("micro")
    epochs: int = schema.epochs(1)
    batch_size: int = schema.batch_size(256)
    learning_rate: float = schema.learning_rate(0.1)
    toy_init: float = setting(0.5, "Toy family (tests/test_families.py): the centre's initial value.", ge=0, le=1)


def flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(len(x), -1)


class ToyRun(TrainingRun):
    def load(self):
        return load_dataset(self.s.dataset, self.s.data_dir)

    def build(self, data) -> Built:
        s = self.s
        x = flat(data.x_train)
        return Built(Toy(x.shape[1], s.toy_init), x, keras.optimizers.SGD(s.learning_rate),
                     s.dp_config(num_partitions=1), s.batch_size, s.epochs, s.sampling)

    def save_model(self) -> None:
        np.save(os.path.join(self.output_dir, CENTRE_FILE), self.built.model.centre.kernel.numpy()[0])

    def evaluate(self) -> dict:
        self.save_model()
        centre = self.built.model.centre.kernel.numpy()[0]
        return {"test_error": float(np.mean(np.sum((flat(self.data.x_test) - centre) ** 2, axis=1)))}


class TrainedToy:
    """The trained centre: `sample(n, seed)` draws N(centre, SAMPLE_STD^2 I) statelessly from `seed`."""

    def __init__(self, centre: np.ndarray):
        self.centre = tf.Variable(centre, trainable=False)

    def sample(self, n, seed) -> tf.Tensor:
        noise = tf.random.stateless_normal(tf.stack([n, tf.shape(self.centre)[0]]), seed=seed_pair(seed, 0))
        return self.centre + SAMPLE_STD * noise


def load_toy(run_dir: str) -> TrainedToy:
    return TrainedToy(np.load(os.path.join(run_dir, CENTRE_FILE)))


def toy_serving(model: TrainedToy) -> Serving:
    return Serving({"sample": function(lambda n, seed: {"x": model.sample(n, seed)}, N, SEED)}, [model.centre])


def run(settings: ToySettings, output_dir: str) -> dict:
    return ToyRun(settings, output_dir).run()


JOB = Job(names=("toy",), settings_type=ToySettings, run=run, training_run=ToyRun, summary="a toy family",
          tuning=FamilyTuning(space={"learning_rate": {"type": "float", "min": 0.01, "max": 0.5, "log": True}},
                              objectives=(Objective("test_error", "min", reads="test"),)))


@pytest.fixture
def toy(monkeypatch):
    """The toy family registered for one test (the registry as it was afterwards)."""
    families()  # the built-ins first
    monkeypatch.setattr(job_registry, "FAMILIES", job_registry.FAMILIES.copy())  # the registry as it was afterwards
    # the one registry line; `synthesis` makes it a synthesizer of tabular rows
    return register(Family(JOB, load=load_toy, serving=toy_serving, synthesis=Synthesis(ndims=(2,))))


def test_a_family_from_outside_tfpriv_trains_loads_and_serves(tmp_path, capsys, toy):
    out = tmp_path / "run"
    proc = train_py("--model=toy", f"--output_dir={out}", "--toy_init=0.25", "--seed=0", "--verbose=0",
                    capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "toy" and 0 < results["epsilon"] < np.inf and results["metrics"]["test_error"] > 0
    assert f"epsilon = {results['epsilon']:.4g}" in proc.stdout
    assert results["saved_model"]["signatures"] == {
        "sample": {"inputs": {"n": "int32[]", "seed": "int64[]"}, "outputs": ["x"]}}
    trained = tfpriv.load(str(out))
    assert isinstance(trained, TrainedToy) and trained.centre.shape == (64,)
    served = tf.saved_model.load(results["saved_model"]["path"]).signatures["sample"](
        n=tf.constant(3), seed=tf.constant(np.int64(5)))["x"]
    np.testing.assert_allclose(served.numpy(), trained.sample(3, 5).numpy(), rtol=1e-6, atol=1e-6)
    # its flag is its own: refused for another family, listed by --help under it
    proc = train_py("--model=privae", "--toy_init=1", f"--output_dir={tmp_path}/other", capsys=capsys)
    assert proc.returncode == 2 and "--toy_init: does not apply to --model=privae" in proc.stderr
    assert "--model=toy (a toy family):" in train_py("--help", capsys=capsys).stdout


def test_a_family_from_outside_tfpriv_is_a_synthesizer_by_its_family_record(toy):
    x = flat(load_dataset("digits").x_train[:300])
    synth = tfpriv.synthesizer("toy", epsilon=2.0, toy_init=0.25, batch_size=300, seed=0).fit(x)  # q = 1
    assert 0 < synth.epsilon <= 2.0 and synth.results["model"] == "toy" and synth.results["epochs"] == 1
    assert synth.sample(4, seed=1).shape == (4, 64)
    with pytest.raises(ConfigError, match=r"^toy_init: must be in \[0, 1\], got 2.0$"):
        tfpriv.synthesizer("toy", epsilon=2.0, toy_init=2.0)  # the schema's bounds, before any training
    with pytest.raises(ConfigError, match="^dataset: not a setting of the toy synthesizer"):
        tfpriv.synthesizer("toy", epsilon=2.0, dataset="mnist")  # the data source is fit's arrays
    with pytest.raises(UsageError, match=r"^x: a toy synthesizer takes \[N, features\]"):
        tfpriv.synthesizer("toy", epsilon=2.0).fit(x.reshape(-1, 8, 8, 1))


def test_a_family_from_outside_tfpriv_tunes(tmp_path, capsys, toy):
    count = TrialCount("geometric", 2.0)
    seed = next(s for s in range(100) if count.sample(np.random.default_rng(s)) == 2)  # the job draws K = 2
    out = tmp_path / "tune"
    proc = train_py("--model=toy", f"--output_dir={out}", "--tune", "--mean_trials=2", f"--seed={seed}",
                    "--verbose=0", capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "private" / "tuning.json").read_text())
    assert [trial["status"] for trial in record["trials"]] == ["COMPLETED", "COMPLETED"]
    released = json.loads((out / "tuning.json").read_text())
    assert released["objective"]["name"] == "test_error" and 0 < released["privacy"]["epsilon"] < np.inf
    best = tfpriv.load(str(out / "best"))
    assert isinstance(best, TrainedToy)


# A user's absl program with flags of tfpriv's names (--epochs, --batch_size, --seed) on absl's FLAGS:
# it makes a run folder with the synthesizer, loads it and exports it; then it imports the command line
# and every family and reports which of absl's flags tfpriv's names share and which tfpriv modules define any.
USER_PROGRAM = """
import json, sys
from absl import app, flags

flags.DEFINE_integer("epochs", 3, "the user's own")
flags.DEFINE_integer("batch_size", 16, "the user's own")
flags.DEFINE_integer("seed", 1, "the user's own")
FLAGS = flags.FLAGS


def main(argv):
    import tfpriv
    from tfpriv.data import load_dataset
    from tfpriv.export import export_run

    run_dir = argv[1]
    x = load_dataset("digits").x_train[:64]  # one batch (q = 1): no subsampled Gaussian to calibrate
    # a small private VAE: per-example clipping of a normal-prior VAE without a batch-wise term
    synth = tfpriv.synthesizer("privae", epsilon=8.0, epochs=1, batch_size=64, latent_dim=2, aggregation="micro",
                               regularizer="none", prior="normal", seed=0).fit(x)
    synth.save(run_dir)
    loaded = tfpriv.load(run_dir)
    exported = export_run(run_dir)
    import tfpriv.cli.main
    from tfpriv import families
    families.families()
    from tfpriv.cli.flags import FLAGS as TFPRIV_FLAGS
    print(json.dumps({"user": [FLAGS.epochs, FLAGS.batch_size, FLAGS.seed], "loaded": type(loaded).__name__,
                      "signatures": sorted(exported["signatures"]), "samples": list(synth.sample(2, seed=0).shape),
                      "tfpriv_flags": len(list(TFPRIV_FLAGS)), "shared": sorted(set(FLAGS) & set(TFPRIV_FLAGS)),
                      "tfpriv_modules": sorted(m for m in FLAGS.flags_by_module_dict() if m.startswith("tfpriv"))}))


app.run(main)
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def user_program(tmp_path_factory):
    """The user's program run once with its own --epochs=5 --batch_size=8 --seed=7: (process, run folder)."""
    run_dir = tmp_path_factory.mktemp("user_program") / "run"
    return run_python(USER_PROGRAM, "--epochs=5", "--batch_size=8", "--seed=7", str(run_dir)), run_dir


def user_program_output(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]  # was DuplicateFlagError: the family modules defined --epochs
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_users_absl_program_with_the_same_flag_names_loads_exports_and_synthesizes(user_program):
    proc, run_dir = user_program
    out = user_program_output(proc)
    assert out["user"] == [5, 8, 7]  # the user's flags are the user's
    assert out["signatures"] and out["samples"][0] == 2
    results = json.loads((run_dir / "results.json").read_text())
    assert results["epochs"] == 1  # the user's --epochs=5 did not reach the synthesizer's settings


def test_importing_tfpriv_defines_no_absl_flag(user_program):
    """After tfpriv, its command line (`tfpriv.cli.main`) and every family are imported, absl's flags that
    have a name of tfpriv's flags are the user program's own three, and no tfpriv module defines an absl flag."""
    out = user_program_output(user_program[0])
    assert out["tfpriv_flags"] > 100, out
    assert out["shared"] == ["batch_size", "epochs", "seed"], out  # the user's (their values above), none of tfpriv's
    assert out["tfpriv_modules"] == [], out
