"""Issue #36, the protocol gap: the ResNet of DPImageBench's protocol, epoch by epoch, on a generator's samples.

    python experiments/frontier/protocol_gap.py experiments/frontier/generators/NAME --data_dir=../shared/data \
        [--classifier_depth=8] [--downstream_epochs=4] [--seed=0] [--lr_step_epochs=20]

A diagnostic, not a protocol number: it trains the protocol's classifier (`tfpriv.metrics.dpimagebench`,
the same recipe, samples and split as `python -m tfpriv.gan.rescore --seed=SEED`) and prints, after every
epoch, the EMA weights' accuracy on the synthetic validation images *and on the real test split*.
`--lr_step_epochs` moves the recipe's learning-rate steps (÷5 every 20 epochs) earlier, to see what a
run shortened below 20 epochs loses by never reaching them. Looking at the test split every epoch is what the protocol forbids for choosing; here nothing is chosen,
the curve only shows whether a low protocol number comes from the epoch choice or from the classifier
itself on these samples.
"""
from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("generator_dir")
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--classifier_depth", type=int, default=8)
    parser.add_argument("--downstream_epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr_step_epochs", type=int, default=None, help="default: the recipe's (20)")
    args = parser.parse_args()
    from tfpriv.compat import keras
    from tfpriv.data import load_dataset
    from tfpriv.gan.evaluation import generate_samples
    from tfpriv.metrics import dpimagebench, resnet

    if args.lr_step_epochs is not None:
        dpimagebench.LR_STEP_EPOCHS = args.lr_step_epochs  # a probe's deviation from the recipe, printed below
    with open(os.path.join(args.generator_dir, "gan.json")) as f:
        config = json.load(f)
    generator = keras.models.load_model(os.path.join(args.generator_dir, "generator.keras"), compile=False)
    images, labels = generate_samples(generator, dpimagebench.SYNTHETIC_EXAMPLES, num_classes=config["num_classes"],
                                      seed=args.seed)
    data = load_dataset("mnist", args.data_dir)
    train, val = dpimagebench.synthetic_split(len(images))
    model = resnet.resnet(images.shape[1:], config["num_classes"], args.classifier_depth, seed=args.seed)

    class Curve:
        """Stands in for the selection: records each epoch's validation and test accuracy, selects nothing."""
        epoch = 0

        def offer(self, correct: int) -> bool:
            self.epoch += 1
            test = dpimagebench.count_correct(model, data.x_test, data.labels_test["label"]) / len(data.x_test)
            print(json.dumps({"generator": args.generator_dir, "depth": args.classifier_depth,
                              "lr_step_epochs": dpimagebench.LR_STEP_EPOCHS, "epoch": self.epoch,
                              "synthetic_validation_accuracy": correct / len(val), "test_accuracy": test}), flush=True)
            return True

    dpimagebench.train_and_select(model, images[train], labels[train], images[val], labels[val], Curve(),
                                  epochs=args.downstream_epochs)


if __name__ == "__main__":
    main()
