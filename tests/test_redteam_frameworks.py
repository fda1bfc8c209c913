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


# ---- TensorFlow ------------------------------------------------------------------------------

def _tf():
    return pytest.importorskip("tensorflow")


def test_tf_function_called_with_tracers_runs_eagerly():
    """A tf.function given a tracer raised AttributeError('__tf_tracing_type__') at the first call:
    TensorFlow's isinstance check against a runtime-checkable Protocol (module typing) was answered
    with the tensor's class. Now the call runs eagerly, with eager's result."""
    tf = _tf()

    def body(x, y):
        return tf.sin(x) * y + tf.reduce_sum(x)

    compiled = tf.function(body)

    def uses_compiled(x, y):
        return compiled(x, y) + 1

    rng = np.random.default_rng(0)
    for fn in (compiled, uses_compiled):
        lazy = lazytrace.trace_graph(fn)
        for _ in range(3):
            x, y = (tf.constant(rng.standard_normal(3).astype(np.float32)) for _ in range(2))
            assert np.array_equal(lazy(x, y), fn(x, y))
        assert lazy.stats.eager == 3


def test_tf_gradient_tape_inside_runs_eagerly():
    """GradientTape.gradient inside the function (not a dispatched op) was given a tracer and raised
    TypeError at the first call, where eager returns the gradient."""
    tf = _tf()

    def step(v, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * x)
        return loss, tape.gradient(loss, v)

    lazy = lazytrace.trace_graph(step)
    rng = np.random.default_rng(1)
    for _ in range(3):
        v0, x0 = rng.standard_normal((2, 3)).astype(np.float32)
        expected = step(tf.Variable(v0), tf.constant(x0))
        got = lazy(tf.Variable(v0), tf.constant(x0))
        assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    assert lazy.stats.eager == 3 and "GradientTape" in next(iter(lazy.stats.reasons))


def test_tf_variable_slice_assign():
    """`v[0].assign(y)`: the tracer sliced a variable as a tensor (no .assign): AttributeError at the
    first call."""
    tf = _tf()

    def set_first(v, x):
        v[0].assign(x[0] * 2)
        return v * 1.0

    lazy = lazytrace.trace_graph(set_first)
    rng = np.random.default_rng(2)
    for _ in range(3):
        v0, x0 = rng.standard_normal((2, 3)).astype(np.float32)
        ve, vl = tf.Variable(v0), tf.Variable(v0)
        assert np.array_equal(lazy(vl, tf.constant(x0)), set_first(ve, tf.constant(x0)))
        assert np.array_equal(vl.numpy(), ve.numpy())

    def read_slice(v, x):
        return v[1:] * x[1:]          # slicing a variable still replays from a graph

    lazy = lazytrace.trace_graph(read_slice)
    for _ in range(3):
        v0, x0 = rng.standard_normal((2, 3)).astype(np.float32)
        v = tf.Variable(v0)
        assert np.array_equal(lazy(v, tf.constant(x0)), read_slice(v, tf.constant(x0)))
    assert lazy.stats.hits == 2
