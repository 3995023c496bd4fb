"""Re-score a finished GAN run under DPImageBench's protocol (docs/dpimagebench.md):

    python -m tfpriv.gan.rescore --run_dir=DIR --eval_protocol=dpimagebench [--selection_epsilon=E]
        [--classifier_depth=110] [--downstream_epochs=50] [--downstream_samples=60000] [--data_dir=D]

Reads DIR/results.json, DIR/gan.json and DIR/generator.keras (a conditional generator), writes
DIR/rescore_dpimagebench.json (the `evaluation` record) and prints its line. The epoch selection
reads the private validation split only if the run held it out of the generator's training
(`evaluation.validation_split.held_out` in its results.json, `--eval_protocol=dpimagebench`); its
epsilon is added to every earlier selection on that split, a total the run's checkpoint keeps next
to its privacy ledger (a folder without its checkpoints/ is refused). A run that trained on the whole
training split is scored with the selection on synthetic validation images (DPImageBench's
`eval.mode=syn`: no private data read, no epsilon), and the record says so.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from tfpriv import run_folder
from tfpriv.errors import UsageError
from tfpriv.files import write_json

OUTPUT_FILE = run_folder.RESCORE_DPIMAGEBENCH_FILE
GAN_MODELS = ("dpwgan_gp", "dpgan")
NO_HOLDOUT_NOTE = ("the generator was trained on the whole training split (no private validation split was held "
                   "out), so each classifier's epoch is chosen on synthetic validation images (DPImageBench's "
                   "eval.mode=syn), not on a private split; its N is the whole split, not DPImageBench's 55,000")


def _read_json(path: str, what: str) -> dict:
    if not os.path.isfile(path):
        raise UsageError(f"run_dir: {path} is missing ({what})")
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as exc:
        raise UsageError(f"run_dir: {path} is not valid JSON ({exc})") from None


def _number(value) -> float:
    return float(value)  # results.json writes inf as "inf"


def rescore(run_dir: str, *, selection_epsilon: float | None = None, depth: int | None = None,
            epochs: int | None = None, samples: int | None = None, data_dir: str | None = None,
            seed: int | None = None, verbose: int = 0) -> dict:
    """DPImageBench's protocol on the generator of the GAN run in `run_dir`; writes and returns the record."""
    from tfpriv.metrics import dpimagebench, resnet
    results = _read_json(os.path.join(run_dir, run_folder.RESULTS_FILE), "the run's record")
    if results.get("model") not in GAN_MODELS:
        raise UsageError(f"run_dir: {run_dir} is not a GAN run (model {results.get('model')!r})")
    config = _read_json(os.path.join(run_dir, run_folder.GAN_CONFIG_FILE), "the generator's settings")
    generator_file = os.path.join(run_dir, run_folder.GENERATOR_FILE)
    if not os.path.isfile(generator_file):
        raise UsageError(f"run_dir: {generator_file} is missing (the generator's weights are needed to re-score)")
    num_classes = config.get("num_classes")
    if not num_classes:
        raise UsageError(f"run_dir: the generator in {run_dir} is unconditional; DPImageBench's protocol trains "
                         "classifiers on labelled samples (every generator it benchmarks is class-conditional)")
    if selection_epsilon is not None and not (math.isfinite(selection_epsilon) and selection_epsilon > 0):
        raise UsageError(f"selection_epsilon: must be a positive finite number, got {selection_epsilon}")
    depth = resnet.DEFAULT_DEPTH if depth is None else depth
    resnet.check_depth(depth)
    epochs = dpimagebench.EPOCHS if epochs is None else epochs
    samples = dpimagebench.SYNTHETIC_EXAMPLES if samples is None else samples
    if samples < dpimagebench.SYNTHETIC_VALIDATION_FRACTION:
        raise UsageError(f"downstream_samples: must be >= {dpimagebench.SYNTHETIC_VALIDATION_FRACTION}, got {samples}")

    from tfpriv.compat import keras
    from tfpriv.data import load_dataset
    from tfpriv.gan import evaluation
    run_evaluation = results.get("evaluation") or {}
    held_out = bool(run_evaluation.get("validation_split", {}).get("held_out"))
    if not held_out and selection_epsilon is not None:
        raise UsageError(f"selection_epsilon: the run in {run_dir} held out no validation split, so the epoch is chosen "
                         "on synthetic images (no private data, no epsilon)")
    data = load_dataset(results["dataset"], data_dir)
    validation = None
    if held_out:
        train, val = dpimagebench.validation_split(len(data.x_train))
        if int(results["num_examples"]) != len(train):
            raise UsageError(f"run_dir: the run trained on {results['num_examples']} examples, but the training split "
                             f"without the validation split has {len(train)}")
        validation = (data.x_train[val], data.labels_train["label"][val])
    generator = keras.models.load_model(generator_file, compile=False)
    images, labels = evaluation.generate_samples(generator, samples, num_classes=num_classes, seed=seed)
    record = evaluation.dpimagebench_record(
        images, labels, data, validation=validation, held_out=held_out, training_epsilon=_number(results["epsilon"]),
        delta=_number(results["delta"]), run_dir=run_dir, selection_epsilon=selection_epsilon,
        depth=depth, epochs=epochs, seed=seed, verbose=verbose,
        progress=(lambda m: print(m, flush=True)) if verbose else None)
    record.update({"run_dir": os.path.abspath(run_dir), "model": results["model"], "dataset": results["dataset"],
                   "num_examples": results["num_examples"]})
    if not held_out:
        record["note"] = NO_HOLDOUT_NOTE
    write_json(os.path.join(run_dir, OUTPUT_FILE), record, indent=2, sort_keys=True)
    return record


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (the project's rule for bad input)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m tfpriv.gan.rescore", description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", required=True, help="a finished GAN run folder")
    parser.add_argument("--eval_protocol", default="dpimagebench", choices=["dpimagebench"])
    parser.add_argument("--selection_epsilon", type=float, default=None,
                        help="epsilon of each classifier's noisy selection (default: the run's epsilon)")
    parser.add_argument("--classifier_depth", type=int, default=None, help="ResNet depth, 6n + 2 (default 110)")
    parser.add_argument("--downstream_epochs", type=int, default=None, help="classifier epochs (default 50)")
    parser.add_argument("--downstream_samples", type=int, default=None, help="synthetic examples (default 60000)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--seed", type=int, default=None, help="latents, labels and initialisation (default: from "
                        "the OS); the selection noise always comes from the OS and is never recorded")
    parser.add_argument("--verbose", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if not os.path.isdir(args.run_dir):
            raise UsageError(f"run_dir: {args.run_dir} is not a folder")
        record = rescore(args.run_dir, selection_epsilon=args.selection_epsilon, depth=args.classifier_depth,
                         epochs=args.downstream_epochs, samples=args.downstream_samples, data_dir=args.data_dir,
                         seed=args.seed, verbose=args.verbose)
    except UsageError as exc:
        message = str(exc).splitlines()[0] if str(exc) else "invalid input"
        flag = {"depth": "classifier_depth", "epochs": "downstream_epochs", "output_dir": "run_dir"}.get(
            exc.param or "", exc.param)
        if flag and message.startswith(f"{exc.param}:"):
            message = f"--{flag}{message[len(exc.param):]}"
        print(f"error: {message}", file=sys.stderr)
        return 2
    from tfpriv.gan.evaluation import protocol_line
    print(protocol_line(record), flush=True)
    print(f"Results: {os.path.join(args.run_dir, OUTPUT_FILE)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
