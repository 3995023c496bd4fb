"""The DP-WGAN-GP critic step with and without the vectorized pfor rule for convolution filter gradients.

Before commit "pfor rule for per-example Conv2DBackpropFilter", TensorFlow's own converter ran
each example's convolution filter gradients in a while_loop. The previous behaviour is traced
into a second copy of the private critic (the rule's context replaced by a no-op at trace time);
both are timed round-robin with the non-private critic in one process, as in bench/throughput.py;
prints and records the per-round speed-up of the current step, per batch size.

    ROUNDS=9 BATCH_SIZES=64,256,512 python experiments/throughput/pfor_before_after.py pfor_before_after.json
(committed: the line pfor_before_after of experiments/throughput/runs.jsonl)
"""
import contextlib
import json
import os
import sys
from unittest import mock
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import tensorflow as tf
from absl import app
from bench import throughput as T
from tfpriv.compat import keras
from tfpriv.privacy import pfor_rules

PRIVATE = "micro, clipping=per_example"


def previous(b):
    with mock.patch.object(pfor_rules, "vectorized_conv_filter_gradients", contextlib.nullcontext):
        return T.critic_config(PRIVATE, b, label=f"{PRIVATE} (previous)")   # traced here


def main(argv):
    rounds = int(os.environ.get("ROUNDS", 9))
    out = []
    for b in [int(v) for v in os.environ.get("BATCH_SIZES", "64,256,512").split(",")]:
        configs = [T.critic_config("none", b), previous(b), T.critic_config(PRIVATE, b)]
        sec = T.run_section("wgan_critic", configs, 2, rounds, {"batch_size": b})
        T.record_speedups(sec, " (previous)", "speedup_over_previous")
        out.append(sec)
        del configs
        keras.backend.clear_session()
    with open(argv[1], "w") as f:
        json.dump({"command": "python experiments/throughput/pfor_before_after.py " + " ".join(argv[1:]),
                   "environment": {k: os.environ[k] for k in ("ROUNDS", "BATCH_SIZES") if k in os.environ},
                   "sections": out}, f, indent=1)


app.run(main)
