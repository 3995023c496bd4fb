"""Several users, one frozen VAE: each user trains its own filter, on its own partition only.

Paper 001 §6.7.5 (2-user MNIST): the training set is cut into `num_parts` equal parts; user k owns
part k, the remaining parts are public (released raw). Each user's filter is an independent job
on its own codes with its own (private, utility) choice. The released training set is the union
(user parts filtered by their owners' filters, public parts raw). The test set is cut the same
way and released the same way. For user k, fresh classifiers for k's private and utility labels
are trained on the whole released training union and scored on user k's released test part.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Mapping

import numpy as np

from tfpriv.filter import pipeline
from tfpriv.filter.tasks import num_classes_of, resolve_label


@dataclasses.dataclass
class User:
    private: str
    utility: str


def partition(n: int, num_parts: int, seed: int = 0) -> list[np.ndarray]:
    """A seeded random split of range(n) into num_parts (near-)equal disjoint parts."""
    return np.array_split(np.random.default_rng(seed).permutation(n), num_parts)


def run_multiuser(codes_train: np.ndarray, codes_test: np.ndarray, labels_train: Mapping[str, np.ndarray],
                  labels_test: Mapping[str, np.ndarray], users: list[User], precision: np.ndarray,
                  cfg: pipeline.FilterConfig, num_parts: int = 10) -> dict:
    """Trains one filter per user on its part; returns per-user raw and released metrics
    (and the trained games under "_games", not for results.json)."""
    parts_train = partition(len(codes_train), num_parts, cfg.seed)
    parts_test = partition(len(codes_test), num_parts, cfg.seed + 1)
    rel_train, rel_test = codes_train.copy(), codes_test.copy()
    release = np.random.default_rng(cfg.release_seed)  # secret noise unless a release seed is given
    out = {"num_parts": num_parts, "users": [], "_games": []}
    role_labels = []
    for k, user in enumerate(users):
        ytr = {"private": resolve_label(labels_train, user.private), "utility": resolve_label(labels_train, user.utility, "--utility_label")}
        yte = {"private": resolve_label(labels_test, user.private), "utility": resolve_label(labels_test, user.utility, "--utility_label")}
        ncls = {r: num_classes_of(ytr[r], yte[r]) for r in ytr}
        own, own_test = parts_train[k], parts_test[k]
        ucfg = dataclasses.replace(cfg, seed=cfg.seed + 100 * k)
        t0 = time.time()
        game = pipeline.train_filter(codes_train[own], ytr["private"][own], ytr["utility"][own],
                                     ncls["private"], ncls["utility"], precision, ucfg)
        seconds = time.time() - t0
        rel_train[own] = game.privatize(codes_train[own], ytr["private"][own], release)
        rel_test[own_test] = game.privatize(codes_test[own_test], yte["private"][own_test], release)
        entry = {"user": k + 1, "private_label": user.private, "utility_label": user.utility,
                 "train_examples": int(len(own)), "filter_seconds": seconds,
                 "divergence_train": game.history[-1]["divergence"] if game.history else None}
        entry.update({k2: v for k2, v in pipeline.filter_privacy(game, cfg.rdp_delta).items()})
        out["users"].append(entry)
        out["_games"].append(game)
        role_labels.append((ytr, yte, ncls, own_test))
    for entry, (ytr, yte, ncls, own_test) in zip(out["users"], role_labels):
        sub = {r: v[own_test] for r, v in yte.items()}
        entry["raw"] = pipeline.evaluate_codes(codes_train, codes_test[own_test], ytr, sub, ncls, cfg)
        entry["released"] = pipeline.evaluate_codes(rel_train, rel_test[own_test], ytr, sub, ncls, cfg)
    return out
