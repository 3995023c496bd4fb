"""The mechanism's random streams: the DP noise draw (normal_once) and stream independence."""
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tfpriv.privacy.rng import box_muller, stream_generator


def test_box_muller_is_tensorflows_normal_kernel():
    """Adjacent uniforms (x0, x1) of one Philox draw give the kernel's pair (r sin, r cos)."""
    key, counter = tf.constant([7], tf.uint64), tf.constant([0, 3], tf.uint64)
    u = tf.raw_ops.StatelessRandomUniformV2(shape=[50_000, 2], key=key, counter=counter, alg=1)
    z = tf.raw_ops.StatelessRandomNormalV2(shape=[50_000, 2], key=key, counter=counter, alg=1).numpy()
    mine = np.stack([t.numpy() for t in box_muller(u[:, 0], u[:, 1])], axis=1)
    np.testing.assert_allclose(mine, z, rtol=2e-5, atol=2e-6)
    # The kernel's floor of 1e-7 on the radius' uniform (u = 0 has probability 2^-23).
    assert box_muller(tf.zeros([1]), tf.fill([1], 0.25))[0].numpy()[0] == pytest.approx(np.sqrt(-2 * np.log(1e-7)))


@pytest.mark.parametrize("shape", [[1], [7], [3, 5], [100_001]])
def test_normal_once_shape_std_and_distribution(shape):
    g = stream_generator(0, "noise")
    z = g.normal_once(shape, stddev=2.5).numpy()
    assert z.shape == tuple(shape) and z.dtype == np.float32 and np.all(np.isfinite(z))
    if z.size > 1000:
        assert stats.kstest(z.ravel() / 2.5, "norm").pvalue > 1e-4
        assert np.std(z) == pytest.approx(2.5, rel=0.02)


def test_normal_once_is_a_function_of_the_generator_state():
    a, b = stream_generator(3, "noise"), stream_generator(3, "noise")
    first = a.normal_once([11]).numpy()
    np.testing.assert_array_equal(first, b.normal_once([11]).numpy())
    state = a.state.numpy()
    second = a.normal_once([11]).numpy()
    assert not np.allclose(first, second)       # the state advanced
    b.state.assign(state)                       # a restored checkpoint continues the stream
    np.testing.assert_array_equal(second, b.normal_once([11]).numpy())
    assert not np.allclose(first, stream_generator(4, "noise").normal_once([11]).numpy())


@pytest.mark.parametrize("dtype", [tf.float64, tf.bfloat16])
def test_normal_once_dtypes(dtype):
    z = stream_generator(0, "noise").normal_once([2001], dtype=dtype)
    assert z.dtype == dtype
    assert np.std(tf.cast(z, tf.float64).numpy()) == pytest.approx(1.0, rel=0.1)


def test_philox_is_tensorflows_philox():
    """The element-wise Philox4x32-10 gives the bits of TensorFlow's stateless kernel."""
    from tfpriv.privacy.rng import philox
    key = (tf.constant(123456789, tf.uint32), tf.constant(987654321, tf.uint32))
    mine = philox(key, tf.constant([[5, 7, 9, 11], [6, 7, 9, 11]], tf.uint32)).numpy().ravel()
    ref = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[8], key=tf.constant([123456789 + (987654321 << 32)], tf.uint64),
        counter=tf.constant([5 + (7 << 32), 9 + (11 << 32)], tf.uint64), alg=1, dtype=tf.uint32).numpy()
    np.testing.assert_array_equal(mine, ref)


def test_a_draws_key_is_philox_of_the_step_state_and_the_draws_number():
    """The k-th draw of a step is keyed by Philox(stream key, (state counter, k, 0x5EED)): the kernel
    op that derives it gives the element-wise `philox` bits (the keys of earlier releases)."""
    from tfpriv.privacy.rng import _STEP_KEY, _words, philox
    g = stream_generator(5, "loss")
    with g.step():
        state = g._scope.state
        keys = [g._draw_key() for _ in range(3)]
    lo, hi = _words(state[0])
    for call, key in enumerate(keys):
        bits = philox(_words(state[2]), tf.stack([lo, hi, tf.constant(call, tf.uint32),
                                                  tf.constant(_STEP_KEY, tf.uint32)])).numpy()
        assert int(key.numpy()) == int(bits[0]) | int(bits[1]) << 32


def _step_draws(n: int, seed: int = 3):
    g = stream_generator(seed, "loss")
    with g.step():
        return [g.normal([n, 5]).numpy(), g.uniform([n]).numpy(), g.uniform([n], 0, 4, tf.int32).numpy(),
                g.slots(3).normal([3 * (n // 3), 2]).numpy().reshape([3, n // 3, 2])]


def test_within_a_step_an_examples_draws_do_not_depend_on_how_many_are_drawn():
    """Row i of every draw of a step (and partition j's k-th slot) is the same whether 6 or 9 rows are
    drawn: adding an example changes no other example's numbers (the known-seed coupling)."""
    small, large = _step_draws(6), _step_draws(9)
    for a, b in zip(small[:3], large[:3]):
        np.testing.assert_array_equal(a, b[:6])
    np.testing.assert_allclose(small[3], large[3][:, :2], rtol=1e-6)
    assert not np.allclose(small[0], _step_draws(6, seed=4)[0])


def test_steps_and_draws_outside_a_step_are_fresh_and_replay_repeats_rows():
    g = stream_generator(0, "loss")
    with g.step():
        first = g.normal([4, 3]).numpy()
    with g.step():
        start = g.calls
        second = g.normal([4, 3]).numpy()
        with g.replaying(start, tf.constant([2])):
            replayed = g.normal([1, 3]).numpy()
        assert g.calls == start + 1  # a replay draws nothing new
    np.testing.assert_array_equal(replayed[0], second[2])
    assert not np.allclose(first, second)
    assert not np.allclose(g.normal([4, 3]).numpy(), g.normal([4, 3]).numpy())
    z = g.normal([200, 100]).numpy().ravel()
    assert stats.kstest(z, "norm").pvalue > 1e-4
    u = g.uniform([20000]).numpy()
    assert stats.kstest(u, "uniform").pvalue > 1e-4 and 0 <= u.min() and u.max() < 1


def test_a_seeded_steps_numbers_are_those_of_earlier_releases():
    """The rows of a step's draws are pinned (taken before the draws became one traced function each): a
    checkpoint written by an earlier release resumes with the numbers it would have drawn, eager and traced."""
    def draws(g):
        with g.step():
            return g.normal([6, 5])[0], g.uniform([6]), g.uniform([7], 0, 4, tf.int32), g.normal([2, 2], dtype=tf.float64)

    eager = draws(stream_generator(11, "loss"))
    traced = tf.function(draws, autograph=False)(stream_generator(11, "loss"))
    for normal, _, ints, wide in (eager, traced):
        np.testing.assert_allclose(normal, [1.2031258, -2.3591554, 0.34456596, 0.36840132, -0.4789129], rtol=1e-6)
        np.testing.assert_array_equal(ints, [3, 1, 3, 2, 2, 3, 3])
        assert wide.dtype == tf.float64
    np.testing.assert_array_equal(eager[1], traced[1])
