"""Stage 2: the filter's min-max game on frozen latent codes (paper 001 eqs. 15-17).

Per step (alternating, as in the Keras WGAN example): (1) the adversary and the utility classifier
each take one Adam step on the current filtered codes (filter held fixed); (2) the filter takes one
step on   −CE_adv(z̃, y) + β·CE_util(z̃, u) + ρ·max(0, D − b)²   against the updated classifiers
(`adversary_objective="ce"`, the paper's). `adversary_objective="confusion"` replaces −CE_adv by the
cross-entropy of the adversary's prediction against the uniform distribution, whose optimum (the
adversary cannot beat guessing) is a fixed point of the alternating updates instead of an orbit.
`adversary_steps` > 1 gives the adversary more updates per filter update. With `ema_decay` > 0 the
release uses an exponential moving average of the filter weights (Polyak averaging, a standard GAN
stabiliser): alternating gradient play tends to circle its equilibrium, and the average sits nearer to
it than the last iterate.
With `label_epsilon` (linear filter only) the game keeps the filter's label-change (ε, δ = `label_delta`)
of tfpriv.filter.rdp at or below that target: after every filter step (and on the released average)
W_y is shrunk whenever max Δᵀ(W_w W_wᵀ)⁻¹Δ exceeds the cap that the target allows (a projection onto
the constraint set along W_y; the moving average of feasible filters need not be feasible, hence
the second projection).
`fit_epochs` runs whole epochs inside one compiled `tf.function` (the speed path); `train_step`
is the same step for `Model.fit`.
"""
from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.filter import divergence as div, rdp
from tfpriv.filter.filters import LinearFilter


class FilterGame(keras.Model):
    """Filter + adversary + utility classifier trained jointly on latent codes (z, y_private, u_utility)."""

    def __init__(self, filter_layer, adversary: keras.Model, utility: keras.Model,
                 precision: np.ndarray, num_private_classes: int, divergence: str = "kl",
                 budget: float = 1.0, utility_weight: float = 1.0, rho_init: float = 10.0,
                 rho_min: float = 2.0, rho_halve_every: int = 500, adversary_objective: str = "ce",
                 adversary_steps: int = 1, ema_decay: float = 0.0, label_epsilon: float | None = None,
                 label_delta: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        if divergence not in div.DIVERGENCES:
            raise UsageError(f"--divergence: must be one of {div.DIVERGENCES}, got {divergence!r}")
        if budget < 0:
            raise UsageError(f"--budget: must be >= 0, got {budget}")
        if adversary_objective not in ("ce", "confusion"):
            raise UsageError(f"--adversary_objective: must be ce or confusion, got {adversary_objective!r}")
        if adversary_steps < 1:
            raise UsageError(f"--adversary_steps: must be >= 1, got {adversary_steps}")
        if not 0.0 <= ema_decay < 1.0:
            raise UsageError(f"--filter_ema: must be in [0, 1), got {ema_decay}")
        if label_epsilon is not None and not isinstance(filter_layer, LinearFilter):
            raise UsageError("label_epsilon: needs the linear filter (the label-change RDP has no closed form "
                             "for the mlp filter)")
        # the largest max Δᵀ(W_w W_wᵀ)⁻¹Δ whose (ε, δ) is within the target; None: unconstrained
        self.label_epsilon, self.label_delta = label_epsilon, float(label_delta)
        self.label_cap = None if label_epsilon is None else rdp.max_sensitivity_sq(label_epsilon, label_delta)
        self.adversary_objective, self.adversary_steps = adversary_objective, int(adversary_steps)
        self.ema_decay = float(ema_decay)
        self.filter_layer = filter_layer
        self.adversary = adversary
        self.utility = utility
        self.precision = tf.constant(precision, tf.float32)
        self.num_private_classes = int(num_private_classes)
        self.divergence_name = divergence
        self.budget = float(budget)
        self.utility_weight = float(utility_weight)
        self.rho_init, self.rho_min, self.rho_halve_every = float(rho_init), float(rho_min), int(rho_halve_every)
        self.rho = tf.Variable(rho_init, trainable=False, dtype=tf.float32, name="rho")
        self.epochs_done = 0
        names = ("adversary_loss", "utility_loss", "filter_loss", "divergence", "penalty")
        self.trackers = {n: keras.metrics.Mean(name=n) for n in names}

    def compile(self, filter_optimizer, adversary_optimizer, utility_optimizer, **kwargs):
        super().compile(**kwargs)
        self.filter_optimizer = filter_optimizer
        self.adversary_optimizer = adversary_optimizer
        self.utility_optimizer = utility_optimizer
        # Create slot variables now so the compiled epoch loop never creates variables.
        self.filter_optimizer.build(self.filter_layer.trainable_variables)
        self.adversary_optimizer.build(self.adversary.trainable_variables)
        self.utility_optimizer.build(self.utility.trainable_variables)
        self.ema_weights = [tf.Variable(v, trainable=False) for v in self.filter_layer.trainable_variables]

    @property
    def metrics(self):
        return list(self.trackers.values())

    def call(self, inputs, training=False):
        z, y = inputs
        return self.filter_layer(z, tf.one_hot(tf.cast(y, tf.int32), self.num_private_classes))

    def _step(self, z, y, u):
        y = tf.cast(y, tf.int32)
        u = tf.cast(u, tf.int32)
        onehot = tf.one_hot(y, self.num_private_classes)
        ce = keras.losses.sparse_categorical_crossentropy
        adv_vars, util_vars = self.adversary.trainable_variables, self.utility.trainable_variables
        for i in range(self.adversary_steps):
            z_tilde = tf.stop_gradient(self.filter_layer(z, onehot))
            with tf.GradientTape(persistent=True) as tape:
                adv_loss = tf.reduce_mean(ce(y, self.adversary(z_tilde, training=True), from_logits=True))
                if i == 0:
                    util_loss = tf.reduce_mean(ce(u, self.utility(z_tilde, training=True), from_logits=True))
            self.adversary_optimizer.apply_gradients(zip(tape.gradient(adv_loss, adv_vars), adv_vars))
            if i == 0:
                self.utility_optimizer.apply_gradients(zip(tape.gradient(util_loss, util_vars), util_vars))
            del tape
        with tf.GradientTape() as tape:
            z_tilde = self.filter_layer(z, onehot)
            adv_logits = self.adversary(z_tilde)
            if self.adversary_objective == "ce":
                privacy_term = -tf.reduce_mean(ce(y, adv_logits, from_logits=True))
            else:  # cross-entropy to the uniform distribution over private classes
                privacy_term = -tf.reduce_mean(tf.nn.log_softmax(adv_logits))
            util = tf.reduce_mean(ce(u, self.utility(z_tilde), from_logits=True))
            d = tf.reduce_mean(div.per_example_divergence(self.divergence_name, z_tilde - z, self.precision))
            pen = div.budget_penalty(d, self.budget, self.rho)
            f_loss = privacy_term + self.utility_weight * util + pen
        f_vars = self.filter_layer.trainable_variables
        self.filter_optimizer.apply_gradients(zip(tape.gradient(f_loss, f_vars), f_vars))
        self.project_label_shift()
        for shadow, v in zip(self.ema_weights, f_vars):
            shadow.assign(self.ema_decay * shadow + (1.0 - self.ema_decay) * v)
        return {"adversary_loss": adv_loss, "utility_loss": util_loss, "filter_loss": f_loss,
                "divergence": d, "penalty": pen}

    def train_step(self, data):
        z, y, u = data
        values = self._step(z, y, u)
        for name, v in values.items():
            self.trackers[name].update_state(v)
        return {n: t.result() for n, t in self.trackers.items()}

    @tf.function
    def _run_epochs(self, z, y, u, first_epoch, n_epochs, batch_size):
        n = tf.shape(z)[0]
        steps = tf.maximum(n // batch_size, 1)
        for e in tf.range(n_epochs):
            self.rho.assign(div.rho_at_epoch(first_epoch + e, self.rho_init, self.rho_halve_every, self.rho_min))
            for t in self.trackers.values():
                t.reset_state()
            perm = tf.random.shuffle(tf.range(n))
            for s in tf.range(steps):
                idx = perm[s * batch_size:(s + 1) * batch_size]
                values = self._step(tf.gather(z, idx), tf.gather(y, idx), tf.gather(u, idx))
                for name, v in values.items():
                    self.trackers[name].update_state(v)
        return {k: t.result() for k, t in self.trackers.items()}

    def fit_epochs(self, z, y, u, epochs: int, batch_size: int = 128, log_every: int = 0,
                   logger=None) -> list[dict]:
        """Trains for `epochs` epochs (shuffled, remainder batch dropped), compiled in chunks of
        `log_every` epochs (all at once if 0). Returns one log dict per chunk (last epoch's means)."""
        z = tf.convert_to_tensor(z, tf.float32)
        y = tf.convert_to_tensor(np.asarray(y), tf.int32)
        u = tf.convert_to_tensor(np.asarray(u), tf.int32)
        chunk = log_every if log_every > 0 else epochs
        history = []
        remaining = int(epochs)
        t0 = time.time()
        while remaining > 0:
            k = min(chunk, remaining)
            logs = self._run_epochs(z, y, u, tf.constant(self.epochs_done, tf.int32),
                                    tf.constant(k, tf.int32), tf.constant(batch_size, tf.int32))
            self.epochs_done += k
            remaining -= k
            entry = {k2: float(v) for k2, v in logs.items()}
            entry.update(epoch=self.epochs_done, rho=float(self.rho.numpy()), seconds=time.time() - t0)
            history.append(entry)
            if logger is not None:
                logger(entry)
        return history

    def project_label_shift(self) -> None:
        """Shrinks W_y so that the label-change RDP meets `label_epsilon` (no-op without a target).
        The scale is computed by tfpriv.filter.rdp on the current weights (a numpy call in the graph)."""
        if self.label_cap is None:
            return
        f = self.filter_layer
        scale = tf.numpy_function(
            lambda wn, wy: np.float32(rdp.label_shift_scale(wn.T, wy.T, self.label_cap)),
            [f.w_noise, f.w_label], tf.float32)
        f.w_label.assign(f.w_label * scale)

    def use_averaged_filter(self) -> None:
        """Replaces the filter weights by their moving average (no-op when ema_decay = 0), projected
        back into the label-RDP constraint."""
        if self.ema_decay > 0:
            for shadow, v in zip(self.ema_weights, self.filter_layer.trainable_variables):
                v.assign(shadow)
        self.project_label_shift()

    def privatize(self, z: np.ndarray, y: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Filtered codes z̃ for codes z and private labels y, with fresh filter noise w from `rng`.

        The label-change guarantee (tfpriv.filter.rdp) holds only if w is secret, so `rng=None`
        draws it from a generator seeded with OS entropy that nothing records; pass a seeded
        generator only when the release is meant to be reproducible."""
        rng = np.random.default_rng() if rng is None else rng
        noise = rng.standard_normal((len(z), self.filter_layer.noise_dim)).astype(np.float32)
        onehot = tf.one_hot(tf.cast(np.asarray(y), tf.int32), self.num_private_classes)
        return self.filter_layer(tf.convert_to_tensor(z, tf.float32), onehot, noise=tf.constant(noise)).numpy()
