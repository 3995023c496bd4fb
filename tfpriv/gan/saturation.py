"""A generator-only bound on its output layer's pre-sigmoid values, against the start-up collapse.

The generator's images are sigmoid(x) of its last layer's output x. Early in private training the
critic learns "a bright background is fake" (MNIST is ~80 % black) and the generator, following
it with Adam, drives every x far below 0: in a stalled run (`flags/dpwgan_gp_mnist_eps10.cfg`,
seed 0, TF 2.21, 1,170 critic steps) x had mean -55 and 95th percentile -28, so sigmoid'(x) < 1e-12,
every image was blank and the generator's gradient vanished while the critic's steps spent privacy
(experiments/frontier/README.md). The term
    s_i = mean_pixels relu(|x_ij| - bound)^2
pulls x back inside [-bound, bound], where sigmoid' >= sigmoid'(bound). It is a loss of the generator
alone, on fresh latents: post-processing of the private critic, no privacy cost.
"""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError

LOGITS_LAYER = "deconv3"  # the layer before the sigmoid in `tfpriv.gan.architectures.build_generator`


def saturation_penalty(logits: tf.Tensor, bound: float) -> tf.Tensor:
    """mean over pixels of relu(|x| - bound)^2 per example [B]."""
    excess = tf.nn.relu(tf.abs(logits) - bound)
    return tf.reduce_mean(tf.reshape(tf.square(excess), [tf.shape(logits)[0], -1]), axis=1)


def with_logits(generator: keras.Model) -> keras.Model:
    """The generator returning (images, pre-sigmoid values): the same layers and variables, two outputs."""
    try:
        logits = generator.get_layer(LOGITS_LAYER).output
    except ValueError:
        raise ConfigError(f"saturation_bound: the generator has no layer {LOGITS_LAYER!r} before its sigmoid "
                          "(tfpriv.gan.architectures.build_generator has one)") from None
    return keras.Model(generator.inputs, [generator.output, logits], name=f"{generator.name}_with_logits")
