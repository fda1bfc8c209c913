"""JAX calls whose arrays come only by keyword, or inside containers, under a trace (backends/jax.py
`run`: flat positional arguments take a one-pass path, the rest the general one)."""
import numpy as np
import pytest

import lazytrace
from lazytrace.graph.ir import Kind

jax = pytest.importorskip("jax", reason="jax is not installed (pip install -e '.[jax]')")
jnp = jax.numpy


@jax.jit
def _scaled(x, *, scale):
    return x * scale


@jax.jit
def _pair_sum(pair):
    return pair[0] + pair[1]


def _data(seed):
    return jnp.asarray(np.random.default_rng(seed).random((3, 4), dtype=np.float32))


@pytest.mark.parametrize("fn", [
    lambda a: _scaled(x=jnp.sin(a), scale=2.0),                 # the only array by keyword
    lambda a: _scaled(jnp.sin(a), scale=a),                     # arrays positional and by keyword
    lambda a: _pair_sum((a, jnp.cos(a))),                       # arrays inside a tuple
    lambda a: jnp.sum(jnp.stack([a, a * 2.0]), axis=0, keepdims=False),   # a list of arrays
])
def test_arrays_by_keyword_or_in_containers_replay_on_new_inputs(fn):
    lazy = lazytrace.trace_graph(fn)
    assert np.array_equal(lazy(_data(0)), fn(_data(0)))
    new = _data(1)
    assert np.array_equal(lazy(new), fn(new))
    assert lazy.stats.hits == 1 and lazy.stats.traces == 1 and lazy.stats.eager == 0


@pytest.mark.parametrize("make", [
    lambda: _data(0),                                           # float32, uncommitted
    lambda: jnp.asarray(2.0),                                   # a weak-typed scalar
    lambda: jnp.arange(6, dtype=jnp.int32).reshape(2, 3) > 2,   # bool
    lambda: jax.device_put(_data(0), jax.devices()[0]),         # committed to its device
    lambda: jax.random.key(0),                                  # a typed key (typeof's own rule)
])
def test_tracer_abstract_value_is_the_arrays(make):
    """A tracer's aval (what jax.numpy's Python path and a jitted call given it read: shape,
    dtype, weak type, sharding) is core.typeof of its array, from the array's own aval where it
    lives on one device; a weak type carried through calls keeps eager's result dtype."""
    from jax._src import core
    seen = []

    def fn(a):
        seen.append((a.aval, core.typeof(a)))
        b = a * 2 if a.dtype != bool and not jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a
        seen.append((b.aval, None))
        return b

    value = make()
    out = lazytrace.trace_graph(fn)(value)
    assert seen[0][0] == core.typeof(value) and seen[0][1] == core.typeof(value)
    assert seen[1][0] == core.typeof(out)
    assert out.dtype == fn(value).dtype and core.typeof(out).weak_type == core.typeof(fn(value)).weak_type


def _exp_caught(a):
    b = jnp.cos(a)                      # outside the try block
    try:
        y = jnp.exp(b)                  # a jitted jax.numpy call, inside try/except
    except Exception:                   # noqa: BLE001 - the path a graph could not take
        y = jnp.zeros_like(b)
    return y


def _sum_caught(a):
    b = jnp.cos(a)
    try:
        y = jnp.sum(b, axis=(0,), keepdims=True)      # jax.numpy's Python wrapper, then its jitted call
    except Exception:                   # noqa: BLE001
        y = b[:1]
    return y


@pytest.mark.parametrize("fn", [_exp_caught, _sum_caught])
def test_a_jitted_call_inside_try_except_is_seen_there(fn):
    """The tracer looks at the code making a jitted call from the frame that called the jitted
    function (above JAX's own frames, backends/jax.py _jitted_call): the call inside the traced
    function's try block with an except clause is marked so (a graph with effects then runs
    eagerly, passes._effects), the one before it is not; eager's results on new inputs."""
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        assert np.array_equal(lazy(_data(seed)), fn(_data(seed)))
    assert lazy.stats.hits == 2
    marks = [node.guarded_by_except for node in lazy.graphs[0].nodes if node.kind is Kind.OP]
    assert marks == [False, True], marks


@pytest.mark.parametrize("fn", [
    lambda a: jnp.mean(a, axis=(0, 1), keepdims=True) * a,      # a tuple of ints positional in the jitted call
    lambda a: jnp.sum(a, axis=(0,), keepdims=True, where=a > 0.5),     # an array by keyword, with a tuple
    lambda a: _pair_sum((a, 1.5)),                              # a tuple of an array and a number
    lambda a: _pair_sum([2.0, a]),
])
def test_tuples_of_numbers_and_of_arrays_in_a_call_replay_on_new_inputs(fn):
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        assert np.array_equal(lazy(_data(seed)), fn(_data(seed)))
    assert lazy.stats.hits == 2 and lazy.stats.traces == 1 and lazy.stats.eager == 0


def test_jax_finds_the_tracers_abstract_value_by_its_type():
    """JAX's table of abstract-value rules holds JaxTracer itself (core.typeof, shaped_abstractify:
    every jitted call given a tracer asks), with core.Tracer's rule (`x.aval`)."""
    from jax._src import core
    from lazytrace.backends.jax import JaxTracer
    assert core.pytype_aval_mappings.get(JaxTracer) is core.pytype_aval_mappings[core.Tracer]
