"""Batch sampling: the batch of global step s is a function of (seed, s), so a resumed run
continues the sequence instead of replaying it."""
import numpy as np
import pytest

from tfpriv.data.sampling import make_dataset, new_sampling_seed
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


def test_shuffle_covers_each_epoch_once():
    epoch = _batches("shuffle", 1, 0, 5)                 # 50 // 10 = 5 batches per epoch
    assert sorted(i for b in epoch for i in b) == list(range(50))


def test_poisson_batch_sizes_follow_the_sampling_rate():
    sizes = [len(b) for b in _batches("poisson", 0, 0, 400)]
    assert np.mean(sizes) == pytest.approx(10, rel=0.05) and len(set(sizes)) > 3


def test_seeds_are_checked_and_drawn_from_the_os():
    with pytest.raises(ConfigError, match="^seed: "):
        make_dataset(X, 10, "poisson", -1)
    assert new_sampling_seed() != new_sampling_seed()
