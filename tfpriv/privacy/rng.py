"""The mechanism's random streams: DP noise and partitions ("noise"), randomness inside a loss ("loss").

Seeded streams get independent Philox keys derived from (seed, stream) with numpy's
SeedSequence. `tf.random.Generator.from_seed(s)` is not used: it puts s in the counter, so
seeds s and s + 1 give the same stream shifted by one block, and two generators seeded with
the same value (formerly the DP noise and a GAN's latents) drew the same numbers.
Unseeded streams come from the OS. Generators are variables: the training runner saves
them in every checkpoint, so a resumed run continues each stream where it stopped.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

STREAMS = {"noise": 1, "loss": 2}


def stream_generator(seed: int | None, stream: str) -> tf.random.Generator:
    """A Philox generator for `stream`; independent of every other stream of the same seed."""
    if stream not in STREAMS:
        raise ValueError(f"stream: must be one of {', '.join(STREAMS)}, got {stream!r}")
    if seed is None:
        return tf.random.Generator.from_non_deterministic_state()
    key = int(np.random.SeedSequence([int(seed), STREAMS[stream]]).generate_state(1, np.uint64)[0]) >> 1
    return tf.random.Generator.from_key_counter(key=key, counter=[0, 0], alg="philox")
