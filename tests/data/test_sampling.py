"""Batch sampling: the batch of global step s is a function of (seed, s), so a resumed run
continues the sequence instead of replaying it."""
import numpy as np
import pytest
import tensorflow as tf

from tfpriv.data.sampling import first_rows, make_dataset, new_sampling_seed
from tfpriv.errors import ConfigError

X = np.arange(50, dtype=np.float32)[:, None]


def _batches(sampling, seed, start, n):
    ds, _, _ = make_dataset(X, 10, sampling, seed, start_step=start)
    return [tuple(b.numpy().ravel().astype(int)) for b in ds.take(n)]


@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_a_resumed_sampler_continues_where_the_first_one_stopped(sampling):
    straight = _batches(sampling, 3, 0, 12)
    assert _batches(sampling, 3, 7, 5) == straight[7:]
    assert len(set(straight)) == len(straight)          # no batch replayed
    assert _batches(sampling, 4, 0, 12) != straight      # the seed matters


def test_shuffle_takes_each_example_at_most_once_an_epoch_and_always_drops_a_position():
    """K = (N - 1) // B batches an epoch: (50 - 1) // 10 = 4, so 10 of 50 positions are dropped; with N = 51
    there are 5 and one is (the coupling of docs/privacy.md needs a dropped position)."""
    epoch = _batches("shuffle", 1, 0, 4)
    seen = [i for b in epoch for i in b]
    assert len(seen) == len(set(seen)) == 40
    assert make_dataset(X, 10, "shuffle", 0)[2] == 4 and make_dataset(np.zeros([51, 1]), 10, "shuffle", 0)[2] == 5
    with pytest.raises(ConfigError, match="^batch_size: must be smaller than the dataset size 50"):
        make_dataset(X, 50, "shuffle", 0)


def test_a_poisson_dataset_starts_where_its_tag_says_whatever_was_prefetched_before():
    """`fit` sets the tag's next step to the model's step count before Keras iterates, so a second fit
    on the same dataset draws later steps (the accountant assumes independent samples per step), and
    what an earlier iterator prefetched does not move the start (the batches stay a function of
    (seed, step))."""
    from tfpriv.data.sampling import poisson_batches, sampled_by
    ds = poisson_batches(X, batch_size=10, seed=3)
    first = [tuple(b.numpy().ravel()) for b in ds.take(5)]
    next(iter(ds))                                     # an iterator that prefetches and is dropped
    sampled_by(ds).next_step = 5
    again = [tuple(b.numpy().ravel()) for b in ds.take(5)]
    assert not set(first) & set(again)
    sampled_by(ds).next_step = 0
    assert [tuple(b.numpy().ravel()) for b in ds.take(5)] == first
    assert sampled_by(ds).scheme == "poisson"
    assert sampled_by(ds.map(lambda b: b)) is None     # a transformed dataset is not tfpriv's sample


def test_poisson_batch_sizes_follow_the_sampling_rate():
    sizes = [len(b) for b in _batches("poisson", 0, 0, 400)]
    assert np.mean(sizes) == pytest.approx(10, rel=0.05) and len(set(sizes)) > 3


def test_seeds_are_checked_and_drawn_from_the_os():
    with pytest.raises(ConfigError, match="^seed: "):
        make_dataset(X, 10, "poisson", -1)
    assert new_sampling_seed() != new_sampling_seed()


def test_a_poisson_batch_is_the_examples_whose_uniform_keyed_by_seed_and_step_is_below_q():
    """Step s's batch is `poisson_mask(seed, s)` (no state), and each example is in each batch with
    probability q: over 400 steps the inclusion counts are Binomial(400, q) (mean and spread)."""
    import tensorflow as tf

    from tfpriv.data.sampling import poisson_mask
    x = np.arange(200)[:, None]
    ds, q, _ = make_dataset(x, 20, "poisson", 5, start_step=3)
    batches = [b.numpy().ravel() for b in ds.take(400)]
    for s in range(3):
        mask = poisson_mask(5, tf.constant(3 + s, tf.int64), 200, q).numpy()
        np.testing.assert_array_equal(batches[s], np.flatnonzero(mask))
    counts = np.bincount(np.concatenate(batches), minlength=200)
    assert counts.mean() == pytest.approx(400 * q, rel=0.02)
    assert counts.var() == pytest.approx(400 * q * (1 - q), rel=0.3)


@pytest.mark.parametrize("arrays", [np.zeros([30, 3], np.float32),
                                    (np.zeros([30, 2, 2], np.float64), np.arange(30, dtype=np.int32)),
                                    [np.zeros([30, 4], np.float32), np.ones([30], bool)]], ids=["array", "tuple", "list"])
@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_first_rows_are_shaped_as_the_datasets_batches(arrays, sampling):
    """What `fit_private` prepares a model on: the batches' structure, trailing shapes and dtypes, one row."""
    ds, _, _ = make_dataset(arrays, 10, sampling, 0)
    rows = first_rows(arrays)
    tf.nest.assert_same_structure(rows, ds.element_spec)
    for row, spec in zip(tf.nest.flatten(rows), tf.nest.flatten(ds.element_spec)):
        assert row.shape[0] == 1 and row.shape[1:] == spec.shape[1:] and row.dtype == spec.dtype


@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_the_pipelines_run_without_the_autotuner_and_the_default_rewrites(sampling):
    """Nothing in them is AUTOTUNE, and the autotuner's sleeping thread held up the end of every `fit` until
    its sleep ended (an iterator is destroyed only then): a 5.3 s fit returned at 10.2 s. The default rewrites
    serialized the arrays held in the pipeline at every iterator: 194 ms a `fit` on MNIST's 60,000 images."""
    ds, _, _ = make_dataset(X, 10, sampling, 0)
    assert ds.options().autotune.enabled is False
    assert ds.options().experimental_optimization.apply_default_optimizations is False
    assert ds.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
