"""The evaluation classifiers behind the DP-GAN scores (inception score, Frechet distance).

A small non-private CNN trained by the project on a dataset's real training images, one per
dataset (MNIST: Schwabedal et al. use one at about 99.6% test accuracy; Fashion-MNIST: the same
network). The default classifiers (DEFAULT_EPOCHS, seed 0, all training images) ship with the
package as Keras HDF5 weights in `eval_classifiers/` with their training record (test accuracy)
next to them; other settings, or a missing/stale shipped copy, are trained once and cached on
disk, keyed by the dataset, MODEL_VERSION, the split and the training settings, so every evaluation
scores samples with the same network. They are evaluation tools, not released models.

`split="train"` (the default, comparable with the literature) fits it on the training split, the
same images a DP GAN trains on privately: its scores depend on that private data without noise,
so they only describe a run. `split="test"` fits it on the test split but its last TEST_HOLDOUT
images (its accuracy is measured on those) and never reads the training split: its scores read
only public data and may choose among private runs (`train.py --tune`).

Reproduce the shipped classifiers (seed 0, deterministic ops; prints each record):
    python -m tfpriv.metrics.eval_classifier --ship --dataset mnist fashion_mnist --data-dir ../shared/data
Train (or load) and cache one for other settings:
    python -m tfpriv.metrics.eval_classifier --dataset=mnist --epochs=2 --data-dir ../shared/data
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from tfpriv.compat import keras
from tfpriv.data.batches import shuffled_batches
from tfpriv.errors import DataError, UsageError
from tfpriv.files import write_json
from tfpriv.training.results import write_results

MODEL_VERSION = "cnn5x5-v1"  # bump when the architecture or training recipe changes
DEFAULT_EPOCHS = 8
FEATURE_DIM = 256
DEFAULT_BATCH_SIZE = 128
DEFAULT_CACHE_DIR = pathlib.Path("~/.cache/tfpriv/eval_classifier")
DATASETS = ("mnist", "fashion_mnist")
SPLITS = ("train", "test")  # what the classifier is fitted on
TEST_HOLDOUT = 1000  # split="test": the last test images, kept out of fitting to measure accuracy
SHIPPED_DIR = pathlib.Path(__file__).resolve().parent / "eval_classifiers"


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise UsageError(f"dataset: must be one of {', '.join(DATASETS)}, got {dataset!r}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise UsageError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")


def load_images(dataset: str, data_dir: str,
                split: str = "train") -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_fit, y_fit, x_eval, y_eval) for a classifier fitted on `split`: the training and the test
    split, or ("test") the test split but its last TEST_HOLDOUT images and those. Images float32
    [n, 28, 28, 1] in [0, 1], checksums verified."""
    from tfpriv.data import load_dataset

    _check_dataset(dataset)
    _check_split(split)
    data = load_dataset(dataset, data_dir)
    x_test, y_test = data.x_test, data.labels_test["label"]
    if split == "test":
        return x_test[:-TEST_HOLDOUT], y_test[:-TEST_HOLDOUT], x_test[-TEST_HOLDOUT:], y_test[-TEST_HOLDOUT:]
    return data.x_train, data.labels_train["label"], x_test, y_test


def build_classifier() -> keras.Model:
    """Two 5x5 conv + pool blocks, a 256-unit feature layer, dropout, softmax over 10 classes."""
    layers = keras.layers
    return keras.Sequential([
        layers.Input((28, 28, 1)),
        layers.Conv2D(32, 5, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 5, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(FEATURE_DIM, activation="relu", name="features"),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax", name="probs"),
    ], name="eval_classifier")


def compiled_classifier(num_examples: int, epochs: int, batch_size: int, seed: int) -> keras.Model:
    """A fresh, seeded classifier compiled with the project's recipe (Adam 1e-3, cosine decay)."""
    keras.utils.set_random_seed(seed)
    model = build_classifier()
    steps = epochs * int(np.ceil(num_examples / batch_size))
    lr = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=max(steps, 1), alpha=0.05)
    model.compile(keras.optimizers.Adam(lr), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def train_classifier(dataset: str, data_dir: str, epochs: int = DEFAULT_EPOCHS, batch_size: int = DEFAULT_BATCH_SIZE,
                     seed: int = 0, max_train_examples: Optional[int] = None,
                     verbose: int = 0, split: str = "train") -> Tuple[keras.Model, Dict]:
    """Trains the classifier on `split` with Adam (lr 1e-3, cosine decay); returns (model, info)."""
    x_train, y_train, x_test, y_test = load_images(dataset, data_dir, split)
    if max_train_examples is not None:
        x_train, y_train = x_train[:max_train_examples], y_train[:max_train_examples]
    model = compiled_classifier(len(x_train), epochs, batch_size, seed)
    start = time.time()
    model.fit(shuffled_batches(x_train, y_train, batch_size, seed), epochs=epochs, verbose=verbose)
    train_seconds = time.time() - start
    _, test_acc = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
    info = {
        "dataset": dataset, "split": split, "model_version": MODEL_VERSION, "epochs": epochs, "batch_size": batch_size, "seed": seed,
        "train_examples": int(len(x_train)), "steps": epochs * int(np.ceil(len(x_train) / batch_size)), "test_accuracy": float(test_acc),
        "train_seconds": float(train_seconds), "tensorflow": tf.__version__,
    }
    return model, info


def cache_key(dataset: str, epochs: int, seed: int, max_train_examples: Optional[int], split: str = "train") -> str:
    n = "all" if max_train_examples is None else str(max_train_examples)
    return f"{dataset}_{MODEL_VERSION}_e{epochs}_n{n}_s{seed}" + ("" if split == "train" else f"_{split}split")


def cached_model_path(dataset: str, cache_dir: Optional[str] = None, epochs: int = DEFAULT_EPOCHS, seed: int = 0,
                      max_train_examples: Optional[int] = None, split: str = "train") -> pathlib.Path:
    """Where `get_classifier` keeps the model for these settings (it exists once trained)."""
    _check_dataset(dataset)
    _check_split(split)
    root = pathlib.Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR.expanduser()
    return root / cache_key(dataset, epochs, seed, max_train_examples, split) / "model.keras"


def _write_run_record(directory: pathlib.Path, info: Dict, batch_size: int) -> None:
    write_results(str(directory), {
        "model": "eval_classifier", "dataset": info["dataset"], "aggregation": "none (non-private)",
        "epsilon": float("inf"), "delta": 0.0, "noise_multiplier": 0.0,
        "effective_noise_multiplier": 0.0, "sampling_rate": batch_size / info["train_examples"],
        "steps": info["steps"], "epochs": info["epochs"],
        "metrics": {"test_accuracy": info["test_accuracy"], "train_seconds": info["train_seconds"]},
        "classifier": info,
    })


def get_classifier(dataset: str, data_dir: str, cache_dir: Optional[str] = None, epochs: int = DEFAULT_EPOCHS,
                         seed: int = 0, max_train_examples: Optional[int] = None,
                         verbose: int = 0, split: str = "train") -> keras.Model:
    """The shipped classifier for the default settings (split "train"), else the cached one for these
    settings (fitted on `split`), training and caching it on first use.

    Cache: `<cache_dir>/<cache_key>/model.keras` with `info.json` (test accuracy, wall time)
    and `results.json`; cache_dir defaults to ~/.cache/tfpriv/eval_classifier.
    """
    if epochs < 1:
        raise UsageError(f"epochs: must be >= 1, got {epochs}")
    if max_train_examples is not None and max_train_examples < 1:
        raise UsageError(f"max_train_examples: must be >= 1, got {max_train_examples}")
    shipped = shipped_classifier(dataset, epochs, seed, max_train_examples, split)
    if shipped is not None:
        return shipped
    model_path = cached_model_path(dataset, cache_dir, epochs, seed, max_train_examples, split)
    directory, root = model_path.parent, model_path.parent.parent
    if model_path.is_file():
        return keras.models.load_model(model_path, compile=False)
    model, info = train_classifier(dataset, data_dir, epochs=epochs, seed=seed,
                                   max_train_examples=max_train_examples, verbose=verbose, split=split)
    tmp = root / (directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.keras")
    (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    _write_run_record(tmp, info, DEFAULT_BATCH_SIZE)
    try:
        os.replace(tmp, directory)  # atomic publish; a concurrent winner keeps its copy
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return model


def shipped_paths(dataset: str, directory: Optional[pathlib.Path] = None) -> Tuple[pathlib.Path, pathlib.Path]:
    """(weights, training record) of the dataset's shipped classifier.

    The weights are Keras' legacy HDF5 format (not `.weights.h5`): it holds the layers' weights
    only and loads them by layer order, so keras 2.15 and tf_keras 2.21 both read it whatever
    names the layers got in the loading process.
    """
    _check_dataset(dataset)
    directory = SHIPPED_DIR if directory is None else directory
    return directory / f"{dataset}_weights.h5", directory / f"{dataset}.json"


def shipped_info(dataset: str, epochs: int = DEFAULT_EPOCHS, seed: int = 0,
                 max_train_examples: Optional[int] = None, split: str = "train") -> Optional[Dict]:
    """The training record of the shipped classifier if it exists and was trained with these
    settings (on the training split) and this MODEL_VERSION, else None."""
    weights, info_path = shipped_paths(dataset)
    if split != "train" or not (weights.is_file() and info_path.is_file()):
        return None
    info = json.loads(info_path.read_text())
    wanted = {"model_version": MODEL_VERSION, "epochs": epochs, "seed": seed, "batch_size": DEFAULT_BATCH_SIZE}
    if max_train_examples is not None or any(info.get(k) != v for k, v in wanted.items()):
        return None
    return info


def shipped_classifier(dataset: str, epochs: int = DEFAULT_EPOCHS, seed: int = 0,
                       max_train_examples: Optional[int] = None, split: str = "train") -> Optional[keras.Model]:
    """The shipped classifier for these settings, or None (other settings, or not shipped)."""
    if shipped_info(dataset, epochs, seed, max_train_examples, split) is None:
        return None
    model = build_classifier()
    model.load_weights(shipped_paths(dataset)[0])
    return model


def is_available(dataset: str, cache_dir: Optional[str] = None, split: str = "train") -> bool:
    """Whether `get_classifier` with the default settings loads a classifier (shipped or cached)
    instead of training one."""
    return (shipped_info(dataset, split=split) is not None
            or cached_model_path(dataset, cache_dir, split=split).is_file())


def ship(dataset: str, data_dir: str, directory: Optional[pathlib.Path] = None) -> Dict:
    """Trains the default classifier (seed 0, deterministic ops) and writes its weights and
    training record to `directory` (the package's copy by default); returns the record."""
    tf.config.experimental.enable_op_determinism()
    model, info = train_classifier(dataset, data_dir, verbose=2)
    info["command"] = ("python -m tfpriv.metrics.eval_classifier --ship --dataset mnist fashion_mnist "
                       "--data-dir DATA_DIR")
    weights, info_path = shipped_paths(dataset, directory)
    weights.parent.mkdir(parents=True, exist_ok=True)
    model.save_weights(weights, save_format="h5")
    write_json(str(info_path), info, indent=2, sort_keys=True)
    return info


def load_info(dataset: str, cache_dir: Optional[str] = None, epochs: int = DEFAULT_EPOCHS, seed: int = 0,
              max_train_examples: Optional[int] = None, split: str = "train") -> Dict:
    """The training record (test accuracy, wall time, ...) of the shipped or cached classifier."""
    info = shipped_info(dataset, epochs, seed, max_train_examples, split)
    if info is not None:
        return info
    path = cached_model_path(dataset, cache_dir, epochs, seed, max_train_examples, split).parent / "info.json"
    if not path.is_file():
        raise DataError(f"{path}: no cached {dataset} evaluation classifier for these settings", param="cache_dir")
    return json.loads(path.read_text())


def classifier_outputs(model: keras.Model, images: np.ndarray,
                       batch_size: int = 1000) -> Tuple[np.ndarray, np.ndarray]:
    """(probs [n, 10], features [n, d]) for images [n, 28, 28, 1] with values in [0, 1].

    features are the input of the final softmax layer (the penultimate representation, the
    256-unit `features` layer; dropout is inactive at inference), for the Frechet distance.
    """
    x = np.asarray(images, dtype=np.float32)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[1:] != (28, 28, 1):
        raise UsageError(f"images: expected shape [n, 28, 28, 1], got {np.shape(images)}")
    if x.size and (x.min() < 0.0 or x.max() > 1.0):
        raise UsageError(f"images: expected values in [0, 1], got range [{x.min():.3g}, {x.max():.3g}]")
    both = keras.Model(model.inputs, [model.output, model.layers[-1].input])
    probs, features = both.predict(x, batch_size=batch_size, verbose=0)
    return probs.astype(np.float64), features.astype(np.float64)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description="Train (or load) and cache a GAN evaluation classifier.")
    parser.add_argument("--dataset", nargs="+", default=["mnist"], choices=DATASETS)
    parser.add_argument("--data-dir", required=True, help="folder holding mnist/ and fashion_mnist/")
    parser.add_argument("--cache-dir", default=None, help="default ~/.cache/tfpriv/eval_classifier")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train", choices=SPLITS, help="fit on the training or the test split")
    parser.add_argument("--ship", action="store_true",
                        help=f"train the default classifiers (seed 0, {DEFAULT_EPOCHS} epochs) into {SHIPPED_DIR}")
    args = parser.parse_args(argv)
    if args.ship and (args.epochs, args.seed, args.split) != (DEFAULT_EPOCHS, 0, "train"):
        parser.error(f"--ship trains the shipped settings (--epochs={DEFAULT_EPOCHS}, --seed=0, --split=train)")
    for dataset in args.dataset:
        try:
            if args.ship:
                info = ship(dataset, args.data_dir)
            else:
                get_classifier(dataset, args.data_dir, args.cache_dir, epochs=args.epochs, seed=args.seed, verbose=2,
                               split=args.split)
                info = load_info(dataset, args.cache_dir, epochs=args.epochs, seed=args.seed, split=args.split)
        except UsageError as err:
            print(err, file=sys.stderr)
            return 2
        print(json.dumps(info, indent=2, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
