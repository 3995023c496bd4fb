"""Issue #36, the generator-EMA lever: the same run's raw and averaged generators, scored alike.

    python experiments/frontier/ema_gain.py --generator_dir=experiments/frontier/generators/NAME \
        --checkpoint=RUN_DIR/checkpoints/ckpt-N [--data_dir=../shared/data] [--skip_ema]

The run's generator.keras holds the EMA weights it sampled from; its last checkpoint holds the raw
(trained) weights. Both are scored as the run scored itself (`--eval_protocol=tfpriv`, the run's
seed: 10,000 samples for IS/FD/label agreement from seed + 2, the downstream CNN on 60,000 samples
from seed + 3 for 3 epochs), so the EMA row must reproduce the run's results.json and the raw row
differs only in the weights. Both generators come from the same private training: no privacy cost.
Prints one JSON line per generator.
"""
from __future__ import annotations

import argparse
import json
import os



def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generator_dir", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--skip_ema", action="store_true", help="score only the raw generator")
    args = parser.parse_args()
    from tfpriv.compat import keras
    from tfpriv.data import load_dataset
    from tfpriv.gan import evaluation
    from tfpriv.gan.architectures import build_generator
    from tfpriv.metrics.eval_classifier import classifier_outputs, get_classifier
    from tfpriv.training.runner import restore_networks

    with open(os.path.join(args.generator_dir, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(args.generator_dir, "gan.json")) as f:
        config = json.load(f)
    seed, epochs = int(results["gan"]["seed"]), int(results["gan"]["downstream_epochs"])
    raw = build_generator(config["generator_capacity"], config["latent_size"], config["num_classes"])
    steps = restore_networks(args.checkpoint, generator=raw)
    generators = {"raw": raw}
    if not args.skip_ema:
        generators["ema"] = keras.models.load_model(os.path.join(args.generator_dir, "generator.keras"), compile=False)

    data = load_dataset(results["dataset"], args.data_dir)
    classifier = get_classifier(results["dataset"], args.data_dir)
    _, reference = classifier_outputs(classifier, data.x_test)
    for name, generator in generators.items():
        images, labels = evaluation.generate_samples(generator, int(results["gan"]["num_samples"]),
                                                     num_classes=config["num_classes"], seed=seed + 2)
        row = {"generator_dir": args.generator_dir, "weights": name, "critic_steps": steps,
               **evaluation.sample_scores(classifier, images, reference, labels)}
        synth, synth_labels = evaluation.generate_samples(generator, int(results["gan"]["downstream_samples"]),
                                                          num_classes=config["num_classes"], seed=seed + 3)
        row.update(evaluation.downstream_accuracy(synth, synth_labels, data.x_test, data.labels_test["label"],
                                                  epochs=epochs, seed=seed))
        row["run_metrics"] = {k: results["metrics"][k] for k in
                              ("downstream_accuracy", "inception_score", "frechet_distance", "label_agreement")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
