"""clipping.py: the ghost and the instantiated (direct) squared norms agree with the naive per-group sum."""
import numpy as np

from tfpriv.privacy.clipping import _balanced, _direct_sq_norms, _ghost_pays, _ghost_sq_norms


def test_ghost_and_direct_norms_equal_the_naive_norm():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=[3, 5, 7]).astype(np.float32), rng.normal(size=[3, 5, 4]).astype(np.float32)
    want = [np.sum(np.einsum("ri,rj->ij", u[g], v[g]) ** 2) for g in range(3)]
    np.testing.assert_allclose(_direct_sq_norms(u, v).numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(_ghost_sq_norms(*_balanced(u, v)).numpy(), want, rtol=1e-5)


def test_ghost_is_chosen_for_one_row_and_for_wide_layers_only():
    assert _ghost_pays(1, 3, 3)
    assert not _ghost_pays(196, 16, 32)     # first conv of the conv VAE: 196 positions, thin factors
    assert _ghost_pays(16, 3136, 256)      # a wide Dense layer, partitions of 16 rows
