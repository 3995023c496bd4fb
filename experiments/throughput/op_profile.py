"""Issue 52: where a `make_private` fit's step time goes, op by op (TensorFlow's profiler, no TensorBoard).

Fits one model of `bench/make_private_models.py` (B = 256, 20 Poisson steps an epoch) twice untimed, then
profiles two more fits and prints the 30 largest host events in ms per step (`ExecutorState::Process` is a
step's executor time; op events are `name:type`; ops that run concurrently each count their own duration).

    python experiments/throughput/op_profile.py convnet private
    python experiments/throughput/op_profile.py convnet non-private
"""
import collections
import glob
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import tfpriv  # noqa: E402
from bench.model_sizes import SIZES  # noqa: E402
from bench.user_models import MODELS, data  # noqa: E402
from tfpriv.compat import keras  # noqa: E402

B, STEPS, PROFILED_FITS = 256, 20, 2


def main(name: str, side: str) -> None:
    x, y = data(name, B * STEPS, SIZES)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras.utils.set_random_seed(0)
    if side == "private":
        model = tfpriv.make_private(MODELS[name](keras, SIZES), loss,
                                    tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                    num_examples=len(x), batch_size=B, delta=1e-5)
        model.compile(optimizer="adam")
        fit = lambda: model.fit(x, y, epochs=1, verbose=0)  # noqa: E731
    else:
        model = MODELS[name](keras, SIZES)
        model.compile(optimizer="adam", loss=loss)
        fit = lambda: model.fit(x, y, batch_size=B, epochs=1, verbose=0)  # noqa: E731
    fit(), fit()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(PROFILED_FITS):
            fit()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    per_event = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if line.name.startswith("tf_"):  # executor and tf.data threads, not Python's
                for event in line.events:
                    per_event[plane.event_metadata[event.metadata_id].name] += event.duration_ps / 1e9
    steps = STEPS * PROFILED_FITS
    print(f"{name}, {side}: ms per step over {steps} steps; load average {os.getloadavg()[0]:.2f}")
    for event, ms in per_event.most_common(30):
        print(f"{ms / steps:8.3f}  {event[:140]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
