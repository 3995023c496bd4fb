"""`OUTPUT_DIR/saved_model`: written by every training run (listed in results.json), served by
`tf.saved_model.load` in a fresh process that never imports tfpriv with the same outputs as the
in-process model, and replaced atomically."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfpriv
from tests.test_trained import tiny_filter_run, tiny_generator_run
from tfpriv.export import export_run
from tfpriv.privae import job as privae_job
from tfpriv.privae.vae import VAE
from tfpriv.run_folder import SAVED_MODEL_DIR

SEED = np.int64(11)

# Runs in a fresh interpreter: TensorFlow only. Serves every case of cases.json, writes outputs.npz.
SERVE = r"""
import json, sys
import numpy as np
import tensorflow as tf
try:  # Keras 2, in which the .keras files were written: tf_keras on TF >= 2.16
    import tf_keras as keras
except ImportError:  # TF 2.15, whose own Keras is Keras 2
    keras = getattr(tf, "keras")

cases, loaded, out = json.load(open(sys.argv[1])), {}, {}
for key, case in cases.items():
    inputs = {k: tf.constant(v) for k, v in np.load(case["inputs"]).items()}
    if "saved_model" in case:
        if case["saved_model"] not in loaded:
            loaded[case["saved_model"]] = tf.saved_model.load(case["saved_model"])
        result = loaded[case["saved_model"]].signatures[case["signature"]](**inputs)
        out.update({f"{key}/{name}": value.numpy() for name, value in result.items()})
    else:  # a Keras part, with the standard Keras call
        model = keras.models.load_model(case["keras"], compile=False)
        args = [inputs[name] for name in case["args"]]
        out[key] = model(args if len(args) > 1 else args[0]).numpy()
np.savez(sys.argv[2], **out)
assert "tfpriv" not in sys.modules, sorted(m for m in sys.modules if m.startswith("tfpriv"))
"""



@pytest.fixture(scope="module")
def privae_run(tmp_path_factory):
    """A tiny PriVAE run on the bundled digits through the shared run sequence (train.py's)."""
    out = str(tmp_path_factory.mktemp("privae") / "run")
    settings = privae_job.JOB.settings(dataset="digits", aggregation="none", num_partitions=1, epochs=1,
                             batch_size=512, seed=0, verbose=0, eval_importance_samples=2, eval_examples=20)
    run = privae_job.PriVAERun(settings, out)
    return run, run.run()


def test_every_run_exports_a_saved_model_listed_in_results(privae_run):
    run, results = privae_run
    stored = json.load(open(os.path.join(run.output_dir, "results.json")))
    assert stored["saved_model"] == results["saved_model"]
    assert stored["saved_model"]["path"] == os.path.join(run.output_dir, SAVED_MODEL_DIR)
    assert stored["saved_model"]["signatures"] == {
        "decode": {"inputs": {"z": "float32[None, 8]"}, "outputs": ["x"]},
        "encode": {"inputs": {"x": "float32[None, 8, 8, 1]"}, "outputs": ["logvar", "mean"]},
        "sample": {"inputs": {"n": "int32[]", "seed": "int64[]"}, "outputs": ["x"]}}
    assert tf.saved_model.contains_saved_model(stored["saved_model"]["path"])
    assert not [name for name in os.listdir(run.output_dir) if name.startswith(".")]  # no temporary folders


def test_load_gives_the_trained_vae_of_a_run(privae_run):
    run, _ = privae_run
    trained, loaded = run.built.model, tfpriv.load(run.output_dir)
    assert isinstance(loaded, VAE) and loaded.prior.config() == trained.prior.config()
    x = run.data.x_test[:5]
    for a, b in zip(loaded.encode(x), trained.encode(x)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    z = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded.decode(z).numpy(), trained.decode(z).numpy())
    np.testing.assert_array_equal(loaded.sample(6, seed=3).numpy(), trained.sample(6, seed=3).numpy())


def _case(tmp_path, key, inputs, **case):
    path = str(tmp_path / f"{key}.npz")
    np.savez(path, **inputs)
    return {**case, "inputs": path}


@pytest.fixture(scope="module")
def statement():
    """A micro run's privacy statement (epsilon by both accountants, computed once for the module)."""
    from tfpriv.privacy.statement import privacy_statement
    return privacy_statement([(0.05, 1.2, 40)], tfpriv.DPConfig(aggregation="micro", noise_multiplier=1.2), 1e-5)


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory, statement):
    """A tiny conditional GAN run and a filter run, each with `statement` in its results.json, exported
    to RUN/sm by `export_run`: {family: (run folder, the in-process trained model, export_run's record)}."""
    from tfpriv.files import write_json

    runs = {}
    for family, make in (("gan", lambda path: tiny_generator_run(path, num_classes=10)),
                         ("filter", lambda path: tiny_filter_run(str(path)))):
        run_dir = tmp_path_factory.mktemp(family) / "run"
        model = make(run_dir)
        record = json.load(open(run_dir / "results.json"))
        write_json(str(run_dir / "results.json"), {**record, "privacy_statement": statement})
        runs[family] = (run_dir, model, export_run(str(run_dir), str(run_dir / "sm")))
    return runs


def test_a_fresh_process_without_tfpriv_serves_the_same_outputs(tmp_path, privae_run, family_runs):
    run, results = privae_run
    vae, vae_export = run.built.model, results["saved_model"]["path"]
    x = run.data.x_test[:5].astype(np.float32)
    z = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    (gan_dir, generator, gan_record), (_, filt, filter_record) = family_runs["gan"], family_runs["filter"]
    assert sorted(gan_record["signatures"]) == ["sample"]
    assert sorted(filter_record["signatures"]) == ["decode", "encode", "privatize_x", "privatize_z"]
    gan_export, filter_export = gan_record["path"], filter_record["path"]
    labels = np.array([3, 1, 4, 1, 5], np.int32)
    fx, fy = np.random.default_rng(2).random((5, 6)).astype(np.float32), np.array([0, 1, 1, 0, 1], np.int32)
    latent = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    n = np.int32(5)
    cases = {
        "vae_sample": _case(tmp_path, "vae_sample", {"n": n, "seed": SEED}, saved_model=vae_export, signature="sample"),
        "vae_encode": _case(tmp_path, "vae_encode", {"x": x}, saved_model=vae_export, signature="encode"),
        "vae_decode": _case(tmp_path, "vae_decode", {"z": z}, saved_model=vae_export, signature="decode"),
        "encoder": _case(tmp_path, "encoder", {"x": x}, keras=os.path.join(run.output_dir, "vae", "encoder.keras"),
                         args=["x"]),
        "decoder": _case(tmp_path, "decoder", {"z": z}, keras=os.path.join(run.output_dir, "vae", "decoder.keras"),
                         args=["z"]),
        "gan_sample": _case(tmp_path, "gan_sample", {"n": n, "seed": SEED, "labels": labels}, saved_model=gan_export,
                            signature="sample"),
        "generator": _case(tmp_path, "generator", {"latent": latent, "labels": labels},
                           keras=str(gan_dir / "generator.keras"), args=["latent", "labels"]),
        "privatize_x": _case(tmp_path, "privatize_x", {"x": fx, "y_private": fy, "seed": SEED},
                             saved_model=filter_export, signature="privatize_x"),
        "privatize_z": _case(tmp_path, "privatize_z", {"z": fx[:, :3], "y_private": fy, "seed": SEED},
                             saved_model=filter_export, signature="privatize_z"),
    }
    json.dump(cases, open(tmp_path / "cases.json", "w"))
    proc = subprocess.run([sys.executable, "-c", SERVE, str(tmp_path / "cases.json"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = dict(np.load(tmp_path / "out.npz"))
    mean, logvar = vae.encode(x)
    expected = {
        "vae_sample/x": vae.sample(5, seed=int(SEED)), "vae_encode/mean": mean, "vae_encode/logvar": logvar,
        "vae_decode/x": vae.decode(z), "encoder": vae.encoder(x), "decoder": vae.decoder(z),
        "gan_sample/x": generator.sample(5, SEED, labels), "generator": generator.generator([latent, labels]),
        "privatize_x/z": filt.privatize_x(fx, fy, SEED), "privatize_z/z": filt.privatize_z(fx[:, :3], fy, SEED),
    }
    assert sorted(served) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(served[key], value.numpy(), rtol=1e-6, atol=1e-6, err_msg=key)


def test_a_multi_user_filter_run_has_signatures_per_user(tmp_path):
    model = tiny_filter_run(str(tmp_path), users=("user1", "user2"))
    signatures = export_run(str(tmp_path))["signatures"]
    assert sorted(signatures) == ["decode", "encode", "privatize_x_user1", "privatize_x_user2", "privatize_z_user1",
                                  "privatize_z_user2"]
    assert signatures["privatize_z_user2"]["inputs"] == {"z": "float32[None, 3]", "y_private": "int32[None]",
                                                          "seed": "int64[]"}
    served = tf.saved_model.load(str(tmp_path / SAVED_MODEL_DIR))
    z, y = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32), np.array([0, 1, 1, 0, 1], np.int32)
    for user in ("user1", "user2"):
        out = served.signatures[f"privatize_z_{user}"](z=tf.constant(z), y_private=tf.constant(y), seed=tf.constant(SEED))
        np.testing.assert_allclose(out["z"].numpy(), model.privatize_z(z, y, SEED, user).numpy(), rtol=1e-6, atol=1e-6)


def test_an_export_is_replaced_atomically(tmp_path, monkeypatch):
    tiny_generator_run(tmp_path / "gan", num_classes=None)
    path = str(tmp_path / "gan" / SAVED_MODEL_DIR)
    export_run(str(tmp_path / "gan"))
    export_run(str(tmp_path / "gan"))  # over an existing export
    first = tf.saved_model.load(path).signatures["sample"](n=tf.constant(2), seed=tf.constant(SEED))["x"].numpy()

    def crash(*args, **kwargs):
        os.makedirs(os.path.join(args[1], "variables"))  # half-written, then fails
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        export_run(str(tmp_path / "gan"))
    assert not [name for name in os.listdir(tmp_path / "gan") if name.startswith(".")]
    kept = tf.saved_model.load(path).signatures["sample"](n=tf.constant(2), seed=tf.constant(SEED))["x"].numpy()
    np.testing.assert_array_equal(kept, first)  # the previous export is intact


@pytest.fixture(scope="module")
def private_privae_run(tmp_path_factory):
    """A tiny private PriVAE run (termwise, z = 1.1, 3 Poisson steps) through the shared run sequence."""
    out = str(tmp_path_factory.mktemp("private_privae") / "run")
    settings = privae_job.JOB.settings(dataset="digits", aggregation="termwise", noise_multiplier=1.1,
                             epochs=1, batch_size=512, seed=0, verbose=0, eval_importance_samples=2, eval_examples=20)
    run = privae_job.PriVAERun(settings, out)
    return run, run.run()


def _assets_statement(saved_model: str) -> dict:
    with open(os.path.join(saved_model, "assets", "privacy_statement.json")) as f:  # json alone reads it
        return json.load(f)


def test_a_runs_export_carries_the_privacy_statement_its_results_record(private_privae_run, privae_run, capsys):
    run, results = private_privae_run
    stored = json.load(open(os.path.join(run.output_dir, "results.json")))
    statement = stored["privacy_statement"]
    assert _assets_statement(stored["saved_model"]["path"]) == statement == results["privacy_statement"]
    assert statement["epsilon"][stored["accountant"]] == stored["epsilon"] and statement["dp"] is True
    for key in ("delta", "noise_multiplier", "effective_noise_multiplier", "steps", "l2_norm_clip", "batch_clip"):
        assert statement[key] == stored[key], key
    q, z, steps = stored["sampling_rate"], stored["effective_noise_multiplier"], stored["steps"]
    assert statement["segments"] == [{"scheme": "poisson", "sampling_rate": q, "steps": steps,
                                      "effective_noise_multiplier": z, "accounted_as": [q, z, steps]}]
    assert statement["sampling"] == "poisson"
    capsys.readouterr()
    tfpriv.load(run.output_dir)
    out = capsys.readouterr().out
    assert out.startswith("privacy statement: epsilon ") and f"{stored['epsilon']:.4g} (rdp)" in out
    non_private = privae_run[1]["saved_model"]["path"]
    assert _assets_statement(non_private)["dp"] is False and "epsilon" not in _assets_statement(non_private)


@pytest.mark.parametrize("family", ["gan", "filter"])
def test_every_familys_export_carries_the_runs_privacy_statement(family_runs, statement, family):
    """The statement written into the run's results.json is the one its export carries."""
    _, _, exported = family_runs[family]
    assert _assets_statement(exported["path"]) == statement
