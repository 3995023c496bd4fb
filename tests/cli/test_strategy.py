"""`train.py --strategy`: two logical CPU devices and a two-worker cluster on loopback train as one
device would; a configuration that cannot be split across replicas is one line, exit 2."""
import json
import os
import socket
import subprocess
import sys

import numpy as np

from tests.cli.helpers import TRAIN, assert_one_line_error, subprocess_train_py, train_py
from tests.conftest import REPO_ROOT
from tfpriv.privae.vae import load_vae

# PriVAE on the bundled digits: termwise with singleton partitions (the MMD term per example), SGD,
# 6 Poisson steps; noise on (z = 2), so equal weights need equal clipped sums AND the same single
# noise of std z*C1/B: had each replica or worker added its own noise (sqrt(2) times the std), or a
# worker drawn another batch, the weights would differ by the noise's scale (~1e-2), not 1e-6.
FLAGS = ["--model=privae", "--num_partitions=0", "--batch_size=256", "--epochs=1", "--optimizer=sgd",
         "--learning_rate=0.5", "--noise_multiplier=2", "--seed=3", "--eval_importance_samples=2",
         "--eval_examples=20", "--verbose=0"]


def _env(**extra) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)
    if "TF_CONFIG" not in extra:
        env.pop("TF_CONFIG", None)
    return env


def _train(out, *args, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, TRAIN, f"--output_dir={out}", *args, *FLAGS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=_env(**env))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _vae_weights(run_dir) -> list[np.ndarray]:
    vae = load_vae(str(run_dir / "vae"))
    return vae.encoder.get_weights() + vae.decoder.get_weights()


def test_two_devices_and_two_workers_train_as_one_device(tmp_path, capsys):
    """`--strategy=mirrored --num_cpu_devices=2`, and two `--strategy=multi_worker` processes
    (TF_CONFIG on 127.0.0.1, free ports), against one device: same VAE to float tolerance, same
    epsilon and steps; only the chief writes its folder. The one-device run is in this process
    (a seeded run is the same in any process: tests/training/test_reproducibility.py), while the
    others train."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    procs = {f"worker{i}": _train(tmp_path / "cluster", "--strategy=multi_worker", TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": i}})) for i in range(2)}
    procs["mirrored"] = _train(tmp_path / "mirrored", "--strategy=mirrored", "--num_cpu_devices=2")
    outputs = {}
    try:
        one = train_py(f"--output_dir={tmp_path / 'one'}", *FLAGS, capsys=capsys)
        assert one.returncode == 0, one.stderr[-3000:]
        for name, proc in procs.items():
            outputs[name] = proc.communicate(timeout=600)
    finally:
        for proc in procs.values():
            proc.kill()
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, outputs[name][1][-3000:])
    assert "worker finished; the chief writes the results to" in outputs["worker1"][0]
    reference = json.load(open(tmp_path / "one" / "results.json"))
    assert reference["steps"] == 6
    for run in ("cluster", "mirrored"):
        results = json.load(open(tmp_path / run / "results.json"))
        assert results["steps"] == reference["steps"] and results["epsilon"] == reference["epsilon"], run
        for a, b in zip(_vae_weights(tmp_path / run), _vae_weights(tmp_path / "one")):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=run)


def test_clipping_groups_of_several_examples_are_refused_on_two_devices(tmp_path):
    """termwise with b = 4 partitions (the default) would form partitions per replica."""
    out = tmp_path / "run"
    proc = subprocess_train_py(f"--output_dir={out}", "--strategy=mirrored", "--num_cpu_devices=2", "--epochs=1",
                               "--verbose=0", "--seed=3")
    line = assert_one_line_error(proc, "--strategy", out)
    assert "aggregation='termwise' clips groups of several examples" in line and "2 replicas" in line
