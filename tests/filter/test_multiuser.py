import numpy as np

from tfpriv.filter.multiuser import partition


def test_partition_is_disjoint_cover_of_equal_parts():
    parts = partition(60_000, 10, seed=3)
    assert [len(p) for p in parts] == [6000] * 10
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(60_000))
    assert not np.array_equal(parts[0], np.arange(6000))  # shuffled
    assert all(np.array_equal(a, b) for a, b in zip(parts, partition(60_000, 10, seed=3)))
