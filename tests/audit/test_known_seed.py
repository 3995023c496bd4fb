"""The known-seed coupling (tfpriv/audit/known_seed.py): with the seed known, adding one example
moves one noiseless step by at most the declared sensitivity."""
import pytest

from tfpriv.audit.sweep import known_seed_cases, run_case


@pytest.mark.parametrize("case", known_seed_cases(), ids=lambda c: c.name)
def test_adding_one_example_moves_a_known_seed_step_within_the_sensitivity(case):
    """Before the streams were keyed by slot: 2.20 (DP-WGAN-GP: interpolation weights drawn after
    n x latent_size latents), 2.67 (VAE, singleton partitions: prior samples after the
    reparameterisation noise), 1.30 (VAE, vectorized, b = 2), with the sweep's default VAE (hidden
    widths 256, 128); now 1.0, 0.93, 0.50, the VAE with one hidden layer of 16 (what the streams
    give each example does not depend on the widths; the Jacobians of the vectorized case are smaller)."""
    result = run_case(case, vae_hidden=(16,))
    assert result["passed"], result
    assert 0.3 < result["max_sensitivity_ratio"] <= 1 + 1e-4
