"""Scoring a generator: inception score, Frechet distance, downstream accuracy, sample grids.

Inception score and Frechet distance use the project's evaluation classifier of the dataset
(`tfpriv.metrics.eval_classifier`): IS on the classifier's probabilities of n samples (10
splits), FD between its penultimate features of the samples and of the real test set.
Downstream accuracy (conditional models): a fresh CNN of the same architecture trained only on
labelled synthetic samples, tested on the real test set (`--eval_protocol=tfpriv`), or
DPImageBench's protocol (`dpimagebench_record`, `tfpriv.metrics.dpimagebench`).
"""
from __future__ import annotations

import os
import time

import numpy as np

from tfpriv.compat import keras
from tfpriv.data.batches import shuffled_batches
from tfpriv.errors import UsageError
from tfpriv.metrics.generative import frechet_distance, inception_score
from tfpriv.metrics.eval_classifier import classifier_outputs, compiled_classifier


def generate_samples(model, n: int, batch_size: int = 1000, num_classes: int | None = None,
                     seed: int | None = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """(images [n, 28, 28, 1] in [0, 1], labels [n] or None); conditional labels are balanced.
    seed None: latents and labels from the OS."""
    if n < 1:
        raise UsageError(f"--num_samples: must be >= 1, got {n}")
    num_classes = num_classes if num_classes is not None else getattr(model, "num_classes", None)
    generator = getattr(model, "generator", model)
    latent_size = generator.inputs[0].shape[-1]
    rng = np.random.default_rng(seed)
    labels = None
    if num_classes:
        labels = (np.arange(n) % num_classes).astype(np.int32)
        rng.shuffle(labels)
    images = []
    for start in range(0, n, batch_size):
        stop = min(n, start + batch_size)
        z = rng.standard_normal((stop - start, latent_size)).astype(np.float32)
        inputs = [z, labels[start:stop]] if num_classes else z
        images.append(np.asarray(generator(inputs, training=False)))
    return np.clip(np.concatenate(images), 0.0, 1.0).astype(np.float32), labels


def sample_scores(classifier: keras.Model, images: np.ndarray, reference_features: np.ndarray | None = None,
                  labels: np.ndarray | None = None) -> dict:
    """IS (mean, std over 10 splits), FD against reference features, and label agreement."""
    probs, features = classifier_outputs(classifier, images)
    is_mean, is_std = inception_score(probs, splits=min(10, len(probs)))
    out = {"inception_score": is_mean, "inception_score_std": is_std}
    if reference_features is not None:
        out["frechet_distance"] = frechet_distance(features, reference_features)
    if labels is not None:
        # How often the evaluation classifier reads the digit the generator was asked for.
        out["label_agreement"] = float(np.mean(probs.argmax(1) == labels))
    return out


def downstream_accuracy(images: np.ndarray, labels: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                        epochs: int = 3, batch_size: int = 128, seed: int = 0, verbose: int = 0) -> dict:
    """Test accuracy on real data of a CNN trained on synthetic (images, labels) only
    (`verbose`: Keras progress of its training)."""
    model = compiled_classifier(len(images), epochs, batch_size, seed)
    start = time.time()
    model.fit(shuffled_batches(images, np.asarray(labels), batch_size, seed), epochs=epochs, verbose=verbose)
    _, acc = model.evaluate(x_test, np.asarray(y_test), batch_size=1000, verbose=0)
    return {"downstream_accuracy": float(acc), "downstream_train_examples": int(len(images)),
            "downstream_epochs": epochs, "downstream_seconds": time.time() - start}


FIDELITY_NOTE = ("inception_score and frechet_distance are the project's: computed with its evaluation classifier "
                 "of the dataset, not Inception-V3 (DPImageBench's FID and IS need Inception-V3 weights, which are "
                 "not available offline: not computed)")


def dpimagebench_record(images: np.ndarray, labels: np.ndarray, data, *, validation, held_out: bool,
                        training_epsilon: float, delta: float, run_dir: str, selection_epsilon: float | None = None,
                        **protocol) -> dict:
    """results.json's `evaluation` under DPImageBench's protocol for a conditional generator's
    labelled samples: `tfpriv.metrics.dpimagebench.evaluate` on the real test split of `data`, with
    the epsilon it adds. `validation`: the private validation split (images, labels) held out of
    the generator's training (`held_out`), or None (selection on synthetic validation images: no
    private data, no epsilon). `selection_epsilon` None: DPImageBench's rule, the generator's
    epsilon. A selection on `validation` adds its epsilon to the total of every selection on that
    split, which the checkpoint of the run in `run_dir` keeps next to its ledger
    (`tfpriv.training.runner.add_selection_epsilon`); the record's `epsilon_selection` is that total."""
    from tfpriv.metrics import dpimagebench
    from tfpriv.training.runner import add_selection_epsilon, read_selection_epsilon
    eps_sel = training_epsilon if selection_epsilon is None else selection_epsilon
    prior = 0.0 if validation is None else read_selection_epsilon(run_dir)  # refused before a classifier trains
    record = dpimagebench.evaluate(images, labels, data.x_test, data.labels_test["label"], validation=validation,
                                   selection_epsilon=eps_sel, **protocol)
    spent = prior if validation is None else add_selection_epsilon(run_dir, record["selection"]["epsilon"])
    return {
        "protocol": "dpimagebench", **record,
        "validation_split": {"examples": dpimagebench.VALIDATION_EXAMPLES, "seed": dpimagebench.SPLIT_SEED,
                             "held_out": held_out},
        "epsilon_training": training_epsilon, "epsilon_selection": spent,
        "epsilon_total": training_epsilon + spent, "delta": delta,  # basic composition (pure-DP selections)
        "fidelity": FIDELITY_NOTE,
    }


def protocol_line(record: dict) -> str:
    """What a dpimagebench evaluation record says, with its epsilon as the parts add up."""
    return (f"dpimagebench ({record['selection']['mode'].replace('_', ' ')}): accuracy {record['accuracy']:.4f}; "
            f"epsilon = {record['epsilon_training']:.4g} (generator) + {record['epsilon_selection']:.4g} "
            f"(selection) = {record['epsilon_total']:.4g} at delta = {record['delta']:g}")


def save_grid(images: np.ndarray, path: str, labels: np.ndarray | None = None, rows: int = 10, cols: int = 10,
              title: str | None = None) -> str:
    """A rows x cols PNG of images; with labels, row r shows digit r (as far as available)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if labels is not None:
        picked = []
        for r in range(rows):
            idx = np.flatnonzero(labels == r)[:cols]
            picked.extend(idx.tolist() + [-1] * (cols - len(idx)))
    else:
        picked = list(range(min(len(images), rows * cols)))
    canvas = np.ones((rows * 29 + 1, cols * 29 + 1), np.float32)
    for k, i in enumerate(picked):
        if i < 0 or i >= len(images):
            continue
        r, c = divmod(k, cols)
        canvas[1 + r * 29:1 + r * 29 + 28, 1 + c * 29:1 + c * 29 + 28] = images[i, :, :, 0]
    fig, ax = plt.subplots(figsize=(cols * 0.45, rows * 0.45 + (0.3 if title else 0)))
    ax.imshow(canvas, cmap="gray", vmin=0, vmax=1)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
