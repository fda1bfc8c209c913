"""Red-team round 5 (NumPy, JAX, TensorFlow): each test failed before its fix. Outputs are compared
with eager calls on new inputs."""
import itertools

import numpy as np
import pytest

import lazytrace


# ---- JAX -------------------------------------------------------------------------------------

def test_jax_callbacks_run_at_every_call():
    """io_callback with no array argument was folded into a constant (every replay returned the
    trace's reading), also inside a jitted function; jax.debug.callback / jax.debug.print nodes
    have no output and were pruned (the callback ran only at the first call)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from jax.experimental import io_callback

    counter = itertools.count()

    def read():
        return np.float32(next(counter))

    def sensor(x):
        return x + io_callback(read, jax.ShapeDtypeStruct((), jnp.float32))

    inner = jax.jit(lambda: io_callback(read, jax.ShapeDtypeStruct((), jnp.float32)))

    def jitted_sensor(x):
        return x + inner()

    for fn in (sensor, jitted_sensor):
        lazy = lazytrace.trace_graph(fn)
        got = [float(lazy(jnp.zeros(2))[0]) for _ in range(3)]
        assert got[1] == got[0] + 1 and got[2] == got[0] + 2, got
        assert float(fn(jnp.zeros(2))[0]) == got[2] + 1
        assert lazy.stats.hits == 0 and "callback" in next(iter(lazy.stats.reasons))

    seen = []
    sink = seen.append       # a bound method: the function changes no global or closure variable

    def logged(x):
        jax.debug.callback(lambda v: sink(float(v.sum())), x)
        return x * 2

    lazy = lazytrace.trace_graph(logged)
    for i in range(3):
        assert np.array_equal(lazy(jnp.full(2, float(i))), jnp.full(2, 2.0 * i))
    assert seen == [0.0, 2.0, 4.0]


def test_jax_debug_print_prints_at_every_call(capfd):
    jax = pytest.importorskip("jax")

    def shown(x):
        jax.debug.print("total {}", x.sum())
        return x + 1

    lazy = lazytrace.trace_graph(shown)
    for i in range(3):
        lazy(jax.numpy.full(2, float(i)))
    out = capfd.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("total")] == \
        ["total 0.0", "total 2.0", "total 4.0"]
