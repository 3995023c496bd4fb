import math

import numpy as np
import pytest

from tfpriv.compat import keras
from tfpriv.errors import UsageError
from tfpriv.metrics import dpimagebench
from tfpriv.metrics.resnet import resnet


def test_validation_split_is_disjoint_fixed_and_covers_the_data():
    train, val = dpimagebench.validation_split(60000)
    assert len(val) == 5000 and len(train) == 55000
    assert not set(train) & set(val) and set(train) | set(val) == set(range(60000))
    again_train, again_val = dpimagebench.validation_split(60000)
    assert np.array_equal(train, again_train) and np.array_equal(val, again_val)
    with pytest.raises(UsageError, match="^num_examples:"):
        dpimagebench.validation_split(5000)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_noise_scale_and_std_follow_the_documented_formula(epsilon):
    assert dpimagebench.laplace_scale(epsilon) == pytest.approx(1.0 / epsilon)
    assert dpimagebench.selection_noise_std(epsilon) == pytest.approx(math.sqrt(2.0) / epsilon)
    assert dpimagebench.composed_epsilon(3.0, epsilon, 2) == pytest.approx(3.0 + 2 * epsilon)


def test_infinite_selection_epsilon_is_noiseless_and_bad_values_are_refused():
    assert dpimagebench.laplace_scale(math.inf) == 0.0
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(UsageError, match="^selection_epsilon:"):
            dpimagebench.laplace_scale(bad)


def test_noiseless_selection_takes_the_largest_count_and_ties_go_to_the_later_epoch():
    selection = dpimagebench.NoisySelection(math.inf, np.random.default_rng(0))
    for count in (3, 7, 5, 7, 2):
        selection.offer(count)
    assert selection.selected == 4


def test_noisy_selection_picks_with_the_laplace_scale_it_states():
    """Counts 10 and 8 with epsilon 0.5 (b = 2): the first epoch is kept iff L1 - L2 > -2, whose
    probability for iid Laplace(b) is 1 - exp(-t/b)(1 + t/(2b))/2 at t = 2, i.e. 0.724 (b = 1: 0.865)."""
    rng, epsilon, trials = np.random.default_rng(1), 0.5, 20000
    first = 0
    for _ in range(trials):
        selection = dpimagebench.NoisySelection(epsilon, rng)
        selection.offer(10)
        selection.offer(8)
        first += selection.selected == 1
    b, t = dpimagebench.laplace_scale(epsilon), 2.0
    expected = 1.0 - 0.5 * math.exp(-t / b) * (1.0 + t / (2.0 * b))
    assert first / trials == pytest.approx(expected, abs=0.015)


class RecordingSelection:
    """Chooses epoch `pick` and keeps the weights the model held at every offer."""

    def __init__(self, model, pick: int):
        self.model, self.pick, self.seen = model, pick, []

    def offer(self, correct: int) -> bool:
        self.seen.append(self.model.get_weights())
        return len(self.seen) == self.pick


def tiny_images(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, 28, 28, 1)).astype(np.float32), np.arange(n) % 10


@pytest.fixture(scope="module")
def selected_run():
    """One 3-epoch `train_and_select` of a depth-8 ResNet with two steps per epoch (batch 256) whose
    selection picks epoch 2: (selected epoch, the weights held at each offer, the weights kept, each
    step's learning rate)."""
    images, labels = tiny_images(260)  # two steps per epoch at batch 256
    model = resnet(depth=8, seed=0)
    selection = RecordingSelection(model, pick=2)
    rates = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            rates.append(float(self.model.optimizer.learning_rate))

    fit = model.fit
    model.fit = lambda *args, **kwargs: fit(*args, **{**kwargs, "callbacks": kwargs["callbacks"] + [Record()]})
    epoch = dpimagebench.train_and_select(model, images, labels, images[:10], labels[:10], selection, epochs=3)
    return epoch, selection.seen, model.get_weights(), rates


def test_the_selected_epochs_averaged_weights_are_the_ones_kept(selected_run):
    epoch, seen, kept, _ = selected_run
    assert epoch == 2 and len(seen) == 3
    assert all(np.array_equal(a, b) for a, b in zip(kept, seen[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(kept, seen[2]))


def test_evaluate_records_each_classifier_and_the_selections_epsilon():
    images, labels = tiny_images(48)
    test_images, test_labels = tiny_images(20, seed=1)
    val = tiny_images(30, seed=2)
    record = dpimagebench.evaluate(images, labels, test_images, test_labels, validation=val, selection_epsilon=0.25,
                                   depth=8, epochs=2, seed=0)
    resnet_record = record["classifiers"]["resnet"]
    assert resnet_record["train_examples"] == 44 and resnet_record["selected_epoch"] in (1, 2)
    assert 0.0 <= record["accuracy"] == resnet_record["test_accuracy"] <= 1.0
    sel = record["selection"]
    assert sel["mode"] == "private_validation" and sel["validation_examples"] == 30
    assert sel["noise_std"] == pytest.approx(math.sqrt(2) / 0.25) and sel["epsilon"] == pytest.approx(0.25)
    assert record["matches_dpimagebench"] is False and record["resnet_matches_dpimagebench"] is False
    assert record["classifiers_averaged"] == ["resnet"]
    synthetic = dpimagebench.evaluate(images, labels, test_images, test_labels, validation=None, depth=8, epochs=1,
                                      seed=0)
    assert synthetic["selection"] == {"mode": "synthetic_validation", "validation_examples": 4, "selections": 1,
                                      "epsilon": 0.0}



def test_a_resnet_110_record_does_not_read_as_dpimagebench_s_three_classifier_average():
    """Issue #47: the source averages ResNet, WRN-40-4 and ResNeXt-29; a ResNet-110 run alone matches its
    ResNet part only."""
    full = dict(epochs=dpimagebench.EPOCHS, depth=110, synthetic_examples=dpimagebench.SYNTHETIC_EXAMPLES)
    resnet_only = dpimagebench.protocol_match(classifiers=("resnet",), **full)
    assert resnet_only == {"resnet_matches_dpimagebench": True, "classifiers_averaged": ["resnet"],
                           "matches_dpimagebench": False}
    assert dpimagebench.protocol_match(classifiers=("resnet", "wrn", "resnext"), **full)["matches_dpimagebench"]
    reduced = dpimagebench.protocol_match(epochs=5, depth=8, synthetic_examples=60000, classifiers=("resnet",))
    assert not reduced["resnet_matches_dpimagebench"] and not reduced["matches_dpimagebench"]


@pytest.mark.parametrize("epochs,step", [(50, 20), (10, 4), (6, 2), (3, 1), (2, 1), (1, 1)])
def test_the_learning_rate_steps_at_the_sources_fractions_of_the_run(epochs, step):
    """50 epochs: the source's ÷5 every 20 epochs; a shortened run steps at 40 % and 80 % of its epochs."""
    assert dpimagebench.lr_step_epochs(epochs) == step


def test_every_step_of_an_epoch_uses_that_epochs_rate(selected_run):
    """Epochs 1, 2, 3 of a 3-epoch run at 0.01, 0.002, 0.0004, from the epoch's first step (torch's StepLR)."""
    rates = selected_run[3]
    np.testing.assert_allclose(rates, [0.01, 0.01, 0.002, 0.002, 0.0004, 0.0004], rtol=1e-6)
