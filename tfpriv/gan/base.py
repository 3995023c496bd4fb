"""`PrivateWGAN`: a Keras GAN whose critic is trained through the DP engine, one critic step per batch.

Each `train_step` is one private critic step on its own Poisson batch, so every step is one
Poisson-sampled Gaussian mechanism for the accountant and the ledger counts exactly those;
after every `critic_steps`-th critic step it takes one generator step. The generator step sees
only the critic and fresh latents/labels (uniform, not the private label marginal), never data:
it is post-processing of the private critic. With `diversity_weight` > 0 the generator step also
pairs its fakes (same label, different latents) and adds Mao et al.'s mode-seeking term
(`tfpriv.gan.diversity`) against collapse within a class; with `saturation_bound` > 0 it adds a
penalty on the generator's pre-sigmoid values beyond +-bound (`tfpriv.gan.saturation`) against
the start-up collapse. Both are losses of the generator alone.

With `noise_multiplicity` K > 1 (DPDM's noise multiplicity, Dockhorn et al. 2023, eq. 6) example
i's critic loss is the mean of its terms over K fakes and K interpolation weights of its own: still
one example's loss, so the same clip C and sensitivity, at about K times the critic's compute. The
draws are the mechanism's, not data, so they cost no privacy. Averaging them before clipping makes
each example's clipped gradient point closer to its expected direction (measured in
experiments/frontier). Per-example clipping only (`per_example` or `vectorized`): ghost-norm
(`fast`) clipping would take the K rows of one example for K examples.

The critic's per-example loss pairs real example i with a fake made from its own latent (and,
conditionally, its own label) and its own interpolation weight: the train step draws them for
the batch's dynamic (Poisson) size and passes them to the engine as per-example inputs, so
example i's term depends on row i only (with K > 1: its K fakes and weights, drawn as row i).
The engine clips the gradient of each example's loss over ALL critic variables jointly at C, adds
N(0, (zC)^2) to the sum once and divides by the expected batch size. How it obtains the
per-example gradients is `DPConfig.clipping`: the DP-WGAN-GP default is `per_example` (each
example's loss alone under `tf.vectorized_map`, exact for the gradient penalty), DPGAN's is `fast`.

Batches are dicts {"image": [B, 28, 28, 1]} (+ "label": [B] int32 when conditional); the
critic's inputs add "fake" [B, 28, 28, 1] and "mix" [B] (with K > 1: [B, K, 28, 28, 1] and
[B, K]).
"""
from __future__ import annotations

import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import ConfigError
from tfpriv.gan.diversity import mode_seeking_loss, mode_seeking_ratio
from tfpriv.gan.saturation import saturation_penalty, with_logits
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.rng import replica_rows, stream_generator
from tfpriv.privacy.terms import BatchLayout, LossTerms, TermSpec
from tfpriv.training.dp_model import DPModel


class PrivateWGAN(DPModel):
    """Base of DP-WGAN-GP and DPGAN. Subclasses define `spec` and `critic_terms`."""

    spec = TermSpec(sample=("wasserstein",))

    def __init__(self, generator: keras.Model, critic: keras.Model, latent_size: int = 128,
                 num_classes: int | None = None, critic_steps: int = 1, generator_batch_size: int | None = None,
                 seed: int | None = None, diversity_weight: float = 0.0, saturation_bound: float = 0.0,
                 noise_multiplicity: int = 1, **kwargs):
        super().__init__(**kwargs)
        if critic_steps < 1:
            raise ConfigError(f"critic_steps: must be >= 1, got {critic_steps}")
        if generator_batch_size is not None and generator_batch_size < 1:
            raise ConfigError(f"generator_batch_size: must be >= 1, got {generator_batch_size}")
        if not 0 <= diversity_weight < float("inf"):
            raise ConfigError(f"diversity_weight: must be a finite number >= 0 (0: off), got {diversity_weight}")
        if not 0 <= saturation_bound < float("inf"):
            raise ConfigError(f"saturation_bound: must be a finite number >= 0 (0: off), got {saturation_bound}")
        if isinstance(noise_multiplicity, bool) or int(noise_multiplicity) != noise_multiplicity or noise_multiplicity < 1:
            raise ConfigError(f"noise_multiplicity: must be an integer >= 1 (1: one fake per example), got {noise_multiplicity}")
        self.generator, self.critic = generator, critic
        self.noise_multiplicity = int(noise_multiplicity)
        self.diversity_weight = float(diversity_weight)
        self.saturation_bound = float(saturation_bound)
        self._generator_logits = with_logits(generator) if saturation_bound > 0 else None
        self.latent_size = int(latent_size)
        self.num_classes = num_classes
        self.critic_steps = int(critic_steps)
        self.generator_batch_size = generator_batch_size
        self.seed = seed  # latents, interpolation weights and generator labels: the model's loss stream

    @property
    def conditional(self) -> bool:
        return self.num_classes is not None

    # -- the DPModel contract ------------------------------------------------------------------
    def compile(self, d_optimizer: keras.optimizers.Optimizer, g_optimizer: keras.optimizers.Optimizer,
                dp: DPConfig, **kwargs):
        """dp: the critic's privatization (aggregation="micro"; "none" for a non-private baseline).
        kwargs: num_examples, delta, max_epsilon (see `DPModel.compile`)."""
        if dp.private and dp.aggregation != "micro":
            raise ConfigError(f"aggregation: a private GAN critic needs per-example clipping (micro), got {dp.aggregation!r}")
        self.check_config(dp)
        if dp.private and self.noise_multiplicity > 1 and dp.clipping == "fast":
            raise ConfigError("noise_multiplicity: with K > 1 an example's loss spans K rows, which fast (ghost-norm) "
                              "clipping would clip as K examples; use clipping='per_example' or 'vectorized'")
        replicas = self.distribute_strategy.num_replicas_in_sync
        if self.critic_steps > 1 and replicas > 1:
            raise ConfigError(f"critic_steps: {self.critic_steps} > 1 puts the generator step in a conditional, "
                              f"which a tf.distribute strategy cannot synchronise across its {replicas} replicas; "
                              "use critic_steps=1 or one replica", param="replicas")
        super().compile(optimizer=d_optimizer, dp=dp, **kwargs)
        self.g_optimizer = g_optimizer
        if self.diversity_weight > 0 and self._generator_batch() < 2:
            raise ConfigError(f"generator_batch_size: the mode-seeking term pairs fakes, so it needs >= 2, "
                              f"got {self._generator_batch()}")
        if self.seed is not None and dp.seed is None:
            self.dp_state.rng = stream_generator(self.seed, "loss")

    @property
    def d_optimizer(self) -> keras.optimizers.Optimizer:
        return self.optimizer

    def check_config(self, dp: DPConfig) -> None:
        """Refuses configurations the model's loss cannot be privatized correctly with."""
        return None

    def term_spec(self) -> TermSpec:
        return self.spec

    def private_root(self) -> tf.Module:
        return self.critic

    def private_inputs(self, data) -> dict:
        """Batches are images, (images,) / (images, labels) or {"image"[, "label"]}: the critic's inputs."""
        batch = data
        if isinstance(data, tuple):
            batch = {"image": data[0]} if len(data) == 1 else {"image": data[0], "label": data[1]}
        elif not isinstance(data, dict):  # an unconditional GAN fitted on an image array
            batch = {"image": data}
        return self.critic_inputs(batch)

    def build_extra(self, sample_batch) -> None:
        self.g_optimizer.build(self.generator.trainable_variables)

    def audit_options(self) -> dict:
        # The owner of an added example controls its image and label; its fake, latent and
        # interpolation weight are the mechanism's draws (rows that stay with the example).
        return {"adversary_keys": ("image", "label"), "num_classes": self.num_classes or 10, "graph": True}

    def loss_terms(self, inputs, layout: BatchLayout, training: bool = True) -> LossTerms:
        """The engine's loss: example i's terms from row i of image/fake/mix/label only (with K > 1 the
        mean of its K draws' terms)."""
        real, fake, labels, mix = inputs["image"], inputs["fake"], inputs.get("label"), inputs["mix"]
        k = self.noise_multiplicity
        if k == 1:
            return LossTerms(sample=self.critic_terms(real, fake, labels, mix))
        rows, real = tf.shape(real)[0], tf.repeat(real, k, axis=0)  # row i*K + j: example i, draw j
        terms = self.critic_terms(real, tf.reshape(fake, tf.shape(real)),
                                  None if labels is None else tf.repeat(labels, k, axis=0), tf.reshape(mix, [-1]))
        return LossTerms(sample={name: tf.reduce_mean(tf.reshape(term, [rows, k]), axis=1)
                                 for name, term in terms.items()})

    def metric_names(self) -> list[str]:
        return ["d_loss", "w_distance", "penalty"] + self.generator_metric_names()

    def generator_metric_names(self) -> list[str]:
        """g_loss: the adversarial part; g_diversity: the mean mode-seeking ratio of the paired fakes;
        g_saturation: the mean saturation penalty."""
        return (["g_loss"] + (["g_diversity"] if self.diversity_weight > 0 else [])
                + (["g_saturation"] if self.saturation_bound > 0 else []))

    # -- inputs --------------------------------------------------------------------------------
    def _latent(self, n) -> tf.Tensor:
        return self.rng.normal(tf.stack([n, self.latent_size]))

    def _generator_in(self, latent, labels):
        return [latent, tf.cast(labels, tf.int32)] if self.conditional else latent

    def _critic_in(self, images, labels):
        return [images, tf.cast(labels, tf.int32)] if self.conditional else images

    def random_labels(self, n) -> tf.Tensor:
        """Uniform labels for generation: drawn without looking at the (private) label marginal."""
        return self.rng.uniform(tf.reshape(n, [1]), 0, self.num_classes, dtype=tf.int32)

    def generate(self, n, labels=None) -> tf.Tensor:
        """n images (with the given, else uniform, labels when conditional)."""
        if self.conditional and labels is None:
            labels = self.random_labels(n)
        return self.generator(self._generator_in(self._latent(n), labels), training=False)

    def critic_inputs(self, batch) -> dict:
        """The real batch plus each example's fake (its own latent and label) and mixing weight; with
        K > 1 its K fakes and weights (row i of one draw each, so they stay the example's own)."""
        if self.conditional and "label" not in batch:
            raise ConfigError("a conditional GAN needs batches with a 'label' entry")
        real = batch["image"]
        n = tf.shape(real)[0]
        labels = batch.get("label") if self.conditional else None
        k = self.noise_multiplicity
        if k == 1:
            fake = self.generator(self._generator_in(self._latent(n), labels), training=True)
            mix = self.rng.uniform(tf.reshape(n, [1]))
        else:
            latent = tf.reshape(self.rng.normal(tf.stack([n, k * self.latent_size])), [-1, self.latent_size])
            fake_labels = None if labels is None else tf.repeat(labels, k, axis=0)
            fake = self.generator(self._generator_in(latent, fake_labels), training=True)
            fake = tf.reshape(fake, tf.concat([[n, k], tf.shape(fake)[1:]], axis=0))
            mix = self.rng.uniform(tf.stack([n, k]))
        out = {"image": real, "fake": tf.stop_gradient(fake), "mix": mix}
        if self.conditional:
            out["label"] = tf.cast(labels, tf.int32)
        return out

    # -- the critic's per-example loss ---------------------------------------------------------
    def critic_terms(self, real, fake, labels, mix) -> dict[str, tf.Tensor]:
        """Named per-example loss terms [B], summing to example i's critic loss."""
        raise NotImplementedError(f"{type(self).__name__} must define its per-example critic terms")

    def generator_loss(self, scores: tf.Tensor) -> tf.Tensor:
        """Per-fake generator loss [B] from the critic's scores of the fakes (WGAN: -D(G(z)))."""
        return -scores

    def after_critic_update(self) -> None:
        """Hook after each critic update (DPGAN: weight clipping, post-processing)."""
        return None

    # -- the step ------------------------------------------------------------------------------
    def _generator_batch(self) -> int:
        if self.generator_batch_size:
            return int(self.generator_batch_size)
        return max(1, int(round(self.dp_config.expected_batch_size or 64)))

    def _generator_labels(self, rows) -> tf.Tensor:
        """Uniform labels; with the mode-seeking term rows i and pairs + i share one (pairs = rows // 2)."""
        if self.diversity_weight == 0:
            return self.random_labels(rows)
        first = self.random_labels(rows // 2)
        return tf.concat([first, first, self.random_labels(rows % 2)], axis=0)

    def _generator_step(self) -> dict:
        n = self._generator_batch()
        # Under a strategy each replica takes its rows of the batch and differentiates the sum
        # over them / n: the all-reduced (summed) gradient is the one device's.
        rows = replica_rows(n)
        labels = self._generator_labels(rows) if self.conditional else None  # drawn before the latents
        latent = self._latent(rows)
        with tf.GradientTape() as tape:
            if self._generator_logits is None:
                fake = self.generator(self._generator_in(latent, labels), training=True)
            else:
                fake, logits = self._generator_logits(self._generator_in(latent, labels), training=True)
            losses = self.generator_loss(self.critic(self._critic_in(fake, labels), training=True))
            loss = tf.reduce_sum(losses) / n
            if self._generator_logits is not None:
                saturation = saturation_penalty(logits, self.saturation_bound)
                loss += tf.reduce_sum(saturation) / n
            if self.diversity_weight > 0:
                pairs = rows // 2
                ratio = mode_seeking_ratio(fake[:pairs], fake[pairs:2 * pairs], latent[:pairs], latent[pairs:2 * pairs])
                loss += self.diversity_weight * tf.reduce_sum(mode_seeking_loss(ratio)) / max(n // 2, 1)
        grads = tape.gradient(loss, self.generator.trainable_variables)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_variables))
        out = {"g_loss": tf.reduce_mean(losses)}
        if self.diversity_weight > 0:
            out["g_diversity"] = tf.reduce_mean(ratio)
        if self._generator_logits is not None:
            out["g_saturation"] = tf.reduce_mean(saturation)
        return out

    def after_private_step(self) -> dict:
        """Weight clipping (DPGAN), then a generator step every `critic_steps` critic steps."""
        self.after_critic_update()
        if self.critic_steps == 1:  # no conditional: a strategy cannot synchronise replicas inside one
            return self._generator_step()
        do_generator = tf.equal(self.step_count % self.critic_steps, 0)
        skipped = {name: tf.constant(0.0) for name in self.generator_metric_names()}
        logs = tf.cond(do_generator, self._generator_step, lambda: skipped)
        weight = tf.cast(do_generator, tf.float32)
        return {name: (value, weight) for name, value in logs.items()}

    def step_logs(self, logs: dict) -> dict:
        # Diagnostics on the private batch (not privatized, like any training-loss log).
        penalty = logs.get("penalty", tf.constant(0.0))
        logs.update(d_loss=logs["wasserstein"] + penalty, w_distance=-logs["wasserstein"], penalty=penalty)
        return logs

    def test_step(self, data):
        return {}
