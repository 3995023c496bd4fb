"""Stage 2 + 3 on latent codes: train a user's filter, release, evaluate, compare to the Gaussian mechanism.

Labels are passed as dicts keyed by role: "private", "utility" and optionally "nontarget".
`FilterConfig` is not validated here: the command line checks its flags once
(tfpriv/filter/job.py) and `FilterGame` / `build_filter` refuse bad values of their own.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping

import numpy as np

from tfpriv.compat import keras
from tfpriv.files import write_json
from tfpriv.filter import baseline, divergence as div, evaluation, rdp
from tfpriv.filter.architectures import build_classifier
from tfpriv.filter.filters import LinearFilter, build_filter
from tfpriv.filter.game import FilterGame


@dataclasses.dataclass
class FilterConfig:
    filter_type: str = "linear"
    noise_dim: int | None = None  # None: the latent dimension
    divergence: str = "kl"
    budget: float = 1.0
    utility_weight: float = 1.0
    rho_init: float = 10.0
    epochs: int = 1000
    batch_size: int = 128
    learning_rate: float = 1e-3
    classifier_kind: str = "mlp"
    eval_epochs: int = 30
    eval_min_steps: int = 3000
    rdp_delta: float = 1e-5
    adversary_objective: str = "ce"
    adversary_steps: int = 1
    ema_decay: float = 0.0
    label_epsilon: float | None = None  # target label-change ε at rdp_delta (None: unconstrained)
    seed: int = 0  # the filter game's and the evaluation's randomness (not the release noise)
    # The release noise: None draws it from OS entropy, never recorded (the label-change guarantee
    # assumes it is secret); an integer makes the released codes reproducible by anyone who knows it.
    release_seed: int | None = None


def train_filter(z: np.ndarray, y: np.ndarray, u: np.ndarray, num_private: int, num_utility: int,
                 precision: np.ndarray, cfg: FilterConfig, log_every: int = 0, logger=None) -> FilterGame:
    """Runs the stage-2 game on codes z with private labels y and utility labels u."""
    keras.utils.set_random_seed(cfg.seed)
    dim = z.shape[1]
    game = FilterGame(
        build_filter(cfg.filter_type, dim, num_private, cfg.noise_dim),
        build_classifier(dim, num_private, cfg.classifier_kind, name="adversary"),
        build_classifier(dim, num_utility, cfg.classifier_kind, name="utility"),
        precision, num_private, divergence=cfg.divergence, budget=cfg.budget,
        utility_weight=cfg.utility_weight, rho_init=cfg.rho_init,
        adversary_objective=cfg.adversary_objective, adversary_steps=cfg.adversary_steps,
        ema_decay=cfg.ema_decay, label_epsilon=cfg.label_epsilon, label_delta=cfg.rdp_delta)
    opt = lambda: keras.optimizers.Adam(cfg.learning_rate)  # noqa: E731
    game.compile(opt(), opt(), opt())
    game.history = game.fit_epochs(z, y, u, cfg.epochs, cfg.batch_size, log_every=log_every, logger=logger)
    game.use_averaged_filter()
    return game


def evaluate_codes(train_codes: np.ndarray, test_codes: np.ndarray, labels_train: Mapping[str, np.ndarray],
                   labels_test: Mapping[str, np.ndarray], num_classes: Mapping[str, int],
                   cfg: FilterConfig) -> dict[str, float]:
    """Flat metrics: {role}_accuracy, {role}_auroc per label role, mutual_information (private, test codes)."""
    keras.utils.set_random_seed(cfg.seed + 1000)
    per = evaluation.evaluate_release(train_codes, test_codes, labels_train, labels_test, num_classes,
                                      cfg.classifier_kind, cfg.eval_epochs, cfg.batch_size, cfg.learning_rate,
                                      cfg.eval_min_steps)
    out = {f"{role}_{m}": v for role, ms in per.items() for m, v in ms.items()}
    out["mutual_information"] = evaluation.mutual_information(test_codes, labels_test["private"], seed=cfg.seed)
    return out


class LabelPrivacyError(RuntimeError):
    """A filter trained for a label-change ε target does not meet it (never reported as if it did)."""


def filter_privacy(game: FilterGame, delta: float) -> dict:
    """Label-change RDP curve and (ε, δ) of a trained linear filter; None entries for the MLP filter.
    Raises LabelPrivacyError if the game had a `label_epsilon` target at this δ and the filter misses it."""
    if not isinstance(game.filter_layer, LinearFilter):
        return {"filter_rdp": None, "filter_epsilon": None, "filter_delta": delta, "filter_rdp_note": "mlp filter: no closed form"}
    curve = rdp.linear_filter_rdp(game.filter_layer.noise_matrix, game.filter_layer.label_matrix)
    eps, order = rdp.rdp_to_epsilon(curve, delta)
    out = {"filter_rdp": curve, "filter_epsilon": eps, "filter_epsilon_order": order, "filter_delta": delta,
           "filter_sensitivity_sq": rdp.label_change_sensitivity_sq(game.filter_layer.noise_matrix,
                                                                     game.filter_layer.label_matrix)}
    if game.label_epsilon is not None:
        if delta != game.label_delta or not eps <= game.label_epsilon:
            raise LabelPrivacyError(f"label_epsilon: the trained filter's label-change epsilon is {eps:.6g} at "
                                    f"delta={delta:g}, above the target {game.label_epsilon:g} at delta="
                                    f"{game.label_delta:g}; refusing to release it")
        out["filter_label_epsilon_target"] = game.label_epsilon
    return out


def release_and_evaluate(game: FilterGame, codes_train: np.ndarray, codes_test: np.ndarray,
                         labels_train: Mapping[str, np.ndarray], labels_test: Mapping[str, np.ndarray],
                         num_classes: Mapping[str, int], precision: np.ndarray, cfg: FilterConfig,
                         gaussian: bool = True) -> dict:
    """Releases train/test codes through a trained filter (noise from `cfg.release_seed`: secret when
    None) and, at the same budget, the Gaussian mechanism; evaluates both with fresh classifiers."""
    release = np.random.default_rng(cfg.release_seed)
    rel_train = game.privatize(codes_train, labels_train["private"], release)
    rel_test = game.privatize(codes_test, labels_test["private"], release)
    res = {"budget": cfg.budget, "seed": cfg.seed, "train_log": game.history[-1] if game.history else {}}
    res["filter"] = evaluate_codes(rel_train, rel_test, labels_train, labels_test, num_classes, cfg)
    res["filter"]["divergence_test"] = div.mean_divergence(cfg.divergence, rel_test - codes_test, precision)
    res["filter"].update(filter_privacy(game, cfg.rdp_delta))
    if gaussian:
        sigma = baseline.gaussian_noise_scale(cfg.budget, precision, cfg.divergence)
        rng = np.random.default_rng(cfg.seed + 11)
        g_train = baseline.gaussian_mechanism(codes_train, sigma, rng)
        g_test = baseline.gaussian_mechanism(codes_test, sigma, rng)
        res["gaussian"] = evaluate_codes(g_train, g_test, labels_train, labels_test, num_classes, cfg)
        res["gaussian"]["sigma"] = sigma
        res["gaussian"]["divergence_test"] = div.mean_divergence(cfg.divergence, g_test - codes_test, precision)
        scale = baseline.covariance_shaped_scale(cfg.budget, codes_train.shape[1], cfg.divergence)
        c_train = baseline.covariance_mechanism(codes_train, scale, precision, rng)
        c_test = baseline.covariance_mechanism(codes_test, scale, precision, rng)
        res["gaussian_cov"] = evaluate_codes(c_train, c_test, labels_train, labels_test, num_classes, cfg)
        res["gaussian_cov"]["scale"] = scale
        res["gaussian_cov"]["divergence_test"] = div.mean_divergence(cfg.divergence, c_test - codes_test, precision)
    res["_game"], res["_release_test"] = game, rel_test
    return res


def run_budget(codes_train: np.ndarray, codes_test: np.ndarray, labels_train: Mapping[str, np.ndarray],
               labels_test: Mapping[str, np.ndarray], num_classes: Mapping[str, int], precision: np.ndarray,
               cfg: FilterConfig, gaussian: bool = True) -> dict:
    """One budget, one seed: filter trained on all train codes vs the Gaussian mechanism."""
    game = train_filter(codes_train, labels_train["private"], labels_train["utility"],
                        num_classes["private"], num_classes["utility"], precision, cfg)
    return release_and_evaluate(game, codes_train, codes_test, labels_train, labels_test, num_classes,
                                precision, cfg, gaussian)


def summarize(values: list[float]) -> dict[str, float]:
    a = np.asarray([v for v in values if v is not None], np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "n": int(len(a))}


FILTER_WEIGHTS, FILTER_CONFIG = "filter_weights.npz", "filter.json"


def save_filter(game: FilterGame, directory: str, config: dict) -> str:
    """Writes a trained filter: its weights (`filter_weights.npz`) and `filter.json` (type, sizes,
    and `config`, e.g. budget and labels); `load_filter` rebuilds it."""
    layer = game.filter_layer
    os.makedirs(directory, exist_ok=True)
    weights = layer.get_weights()
    np.savez_compressed(os.path.join(directory, FILTER_WEIGHTS), *weights)
    kind = "linear" if isinstance(layer, LinearFilter) else "mlp"
    record = {"filter_type": kind, "latent_dim": layer.latent_dim, "num_private_classes": layer.num_private_classes,
              "noise_dim": layer.noise_dim, "weights": [list(w.shape) for w in weights], **config}
    write_json(os.path.join(directory, FILTER_CONFIG), record, sort_keys=True)
    return directory


def load_filter(directory: str):
    """The filter layer saved by `save_filter` (call it as `layer(z, onehot(y))`)."""
    with open(os.path.join(directory, FILTER_CONFIG)) as f:
        record = json.load(f)
    layer = build_filter(record["filter_type"], record["latent_dim"], record["num_private_classes"], record["noise_dim"])
    with np.load(os.path.join(directory, FILTER_WEIGHTS)) as data:
        layer.set_weights([data[f"arr_{i}"] for i in range(len(data.files))])
    return layer
