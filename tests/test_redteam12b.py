"""Red team 12b: NumPy, JAX and TensorFlow replays that differed from eager without saying so."""
import random

import numpy as np
import pytest

import lazytrace


def _draws(fn, make):
    lazy = lazytrace.trace_graph(fn)
    results = [lazy(make()) for _ in range(3)]
    return lazy, results


def test_a_numpy_generator_made_unseeded_inside_draws_anew_at_every_call():
    def noise(x):
        return x + np.random.default_rng().random(x.shape)

    lazy, results = _draws(noise, lambda: np.zeros(4))
    assert not np.array_equal(results[1], results[2])     # a graph baked one draw
    assert lazy.stats.eager == 3 and "entropy" in next(iter(lazy.stats.reasons))


def test_a_python_random_made_unseeded_inside_draws_anew_at_every_call():
    def jitter(x):
        return x * random.Random().random()

    lazy, results = _draws(jitter, lambda: np.ones(3))
    assert not np.array_equal(results[1], results[2])
    assert lazy.stats.eager == 3


def test_a_function_without_fresh_generators_still_replays():
    def scale(x, rng):
        return x * 2 + rng.random(x.shape)

    lazy = lazytrace.trace_graph(scale)
    for seed in range(3):
        np.testing.assert_array_equal(lazy(np.ones(3), np.random.default_rng(seed)),
                                      scale(np.ones(3), np.random.default_rng(seed)))
    assert lazy.stats.hits == 2 and lazy.stats.eager == 0


def test_jax_device_get_gives_numpy_arrays_as_in_eager():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def to_host(x):
        return jax.device_get(x * 2), x + 1

    lazy = lazytrace.trace_graph(to_host)
    for i in range(3):
        x = jnp.arange(3.0) + i
        host, dev = lazy(x)
        expected = to_host(x)
        assert type(host) is type(expected[0]) is np.ndarray
        np.testing.assert_array_equal(host, expected[0])
        np.testing.assert_array_equal(dev, expected[1])
    assert lazy.stats.eager == 3 and "device_get" in next(iter(lazy.stats.reasons))
