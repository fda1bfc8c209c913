"""JAX specifics: random keys as inputs, static args, outer transformations, jax.jit, weak types."""
import threading

import numpy as np
import pytest

import lazytrace
from conftest import calls

jax = pytest.importorskip("jax", reason="jax is not installed (pip install -e '.[jax]')")
jnp = jax.numpy


def noisy_blur(x, key, sigma):
    r = jnp.arange(5.0) - 2
    k = jnp.exp(-(r ** 2) / (2 * sigma ** 2))        # built from Python numbers: one constant
    k = k / k.sum()
    y = jnp.convolve(x, k, mode="same")
    y = jax.nn.softplus(y) + 0.1 * jax.random.normal(key, x.shape)
    return jax.lax.clamp(0.0, y, 2.0).astype(jnp.float32) @ x


def test_library_calls_and_keys_are_inputs_not_baked():
    lazy = lazytrace.trace_graph(noisy_blur)
    x = jnp.linspace(0, 1, 16)
    lazy(x, jax.random.key(0), 1.5)
    for seed in (1, 2):
        x2, key = jax.random.uniform(jax.random.key(10 + seed), (16,)), jax.random.key(seed)
        assert np.array_equal(lazy(x2, key, 1.5), noisy_blur(x2, key, 1.5))
    assert lazy.stats.hits == 2 and lazy.stats.traces == 1
    assert not np.array_equal(lazy(x, jax.random.key(1), 1.5), lazy(x, jax.random.key(2), 1.5))
    graph = lazy.graph_for(x, jax.random.key(0), 1.5)
    assert "exp(" not in graph.source and graph.dropped["folded"] >= 4     # the kernel is a constant (not called)


def test_raw_uint32_keys_and_split_are_traced():
    def fn(x, key):
        k1, k2 = jax.random.split(key)
        return x + jax.random.uniform(k1, x.shape) - jax.random.bernoulli(k2, 0.5, x.shape)

    lazy = lazytrace.trace_graph(fn)
    x = jnp.zeros(4)
    for seed in range(3):
        assert np.array_equal(lazy(x, jax.random.PRNGKey(seed)), fn(x, jax.random.PRNGKey(seed)))
    assert lazy.stats.hits == 2


def test_static_argnums_and_argnames_like_jax_jit():
    def fn(x, n, *, axis):
        return jnp.sum(x ** n, axis=axis)

    lazy = lazytrace.trace_graph(fn, static_argnums=1, static_argnames="axis")
    x = jnp.arange(6.0).reshape(2, 3)
    for n, axis in [(2, 0), (2, 0), (3, 1), (2, 0)]:
        assert np.array_equal(lazy(x + n, n, axis=axis), fn(x + n, n, axis=axis))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2
    compiled = lazytrace.trace_graph(fn, static_argnums=1, static_argnames="axis",
                                     return_backend_traced_fn=True)
    assert np.allclose(compiled(x, 2, axis=1), fn(x, 2, axis=1))
    assert np.allclose(compiled(x + 1, 2, axis=1), fn(x + 1, 2, axis=1))
    assert hasattr(compiled.graph_for(x, 2, axis=1).fn, "lower")        # handed to jax.jit


def test_grad_and_vmap_applied_from_outside():
    def fn(x):
        return jnp.tanh(x * 3.0).sum() + jnp.log1p(x ** 2).mean()

    lazy = lazytrace.trace_graph(fn)
    x = jnp.linspace(-1, 1, 8)
    lazy(x)                                                # a graph traced on concrete arrays
    assert np.allclose(jax.grad(lazy)(x), jax.grad(fn)(x))
    xs = jnp.stack([x, 2 * x])
    assert np.allclose(jax.vmap(lazy)(xs), jax.vmap(fn)(xs))
    assert np.allclose(jax.jit(lazy)(x), fn(x))
    assert np.allclose(jax.grad(lazy)(x * 2), jax.grad(fn)(x * 2))      # cached for the tracer type


def test_weak_types_are_part_of_the_key():
    lazy = lazytrace.trace_graph(lambda x: x * 2)
    weak, strong = jnp.asarray(1.5), jnp.asarray(1.5, dtype=jnp.float32)
    assert weak.weak_type and not strong.weak_type
    for a in (weak, strong, weak):
        out = lazy(a)
        assert out.weak_type == a.weak_type and float(out) == 3.0
    assert lazy.stats.traces == 2


def test_values_needed_by_jax_make_the_call_eager():
    def fn(x):
        return x[x > 0].sum() + len(x)           # a boolean mask: a shape from the data

    lazy = lazytrace.trace_graph(fn)
    for x in (jnp.array([1.0, -1.0, 2.0]), jnp.array([1.0, 3.0, 2.0])):
        assert float(lazy(x)) == float(fn(x))
    assert lazy.stats.eager == 2 and lazy.stats.hits == 0


def test_numpy_inside_a_jax_function_runs_eagerly():
    def fn(x):
        return jnp.asarray(np.cumsum(np.asarray(x))) * x

    lazy = lazytrace.trace_graph(fn)
    for x in (jnp.ones(3), jnp.arange(3.0)):
        assert np.array_equal(lazy(x), fn(x))
    assert lazy.stats.eager == 2 and lazy.stats.hits == 0


def test_a_jax_trace_records_nothing_from_other_threads():
    inside, go_on = threading.Event(), threading.Event()

    def fn(x):
        y = x + 1
        inside.set()
        go_on.wait(5)
        return y * 2

    lazy = lazytrace.trace_graph(fn)
    t = threading.Thread(target=lambda: lazy(jnp.ones(3)))
    t.start()
    inside.wait(5)
    other = jnp.ones(3)
    for _ in range(5):
        other = jnp.sin(other) + jnp.cos(other)
    go_on.set()
    t.join()
    assert len(calls(lazy.graphs[0])) == 2
    assert np.array_equal(lazy(jnp.zeros(3)), jnp.full(3, 2.0))


def test_custom_derivative_rules_survive_the_graph():
    def fn(x):      # relu's rule gives 0 at 0 (max would give 0.5); logsumexp's is the stable one
        return jax.nn.relu(x).sum() + jax.nn.softplus(x).sum() + jax.nn.logsumexp(x * 1000.0)

    x = jnp.array([0.0, 1.0, -1.0, 50.0])
    lazy = lazytrace.trace_graph(fn)
    lazy(x)
    assert np.array_equal(jax.grad(lazy)(x), jax.grad(fn)(x))
    assert np.array_equal(jax.grad(lazy)(x + 0.0), jax.grad(fn)(x))
    fresh = lazytrace.trace_graph(fn)                     # first traced under grad: eager, same rules
    assert np.array_equal(jax.grad(fresh)(x), jax.grad(fn)(x))
    assert np.array_equal(jax.grad(fresh)(x), jax.grad(fn)(x))
    assert fresh.stats.eager == 2 and "derivative rule" in next(iter(fresh.stats.reasons))


def test_jax_config_is_part_of_the_key():
    lazy = lazytrace.trace_graph(lambda x: x * 0.1 + jnp.arange(3))
    x = jnp.ones(3, dtype=jnp.float32)
    lazy(x), lazy(x)
    jax.config.update("jax_enable_x64", True)
    try:
        out = lazy(x)
        assert out.dtype == (x * 0.1 + jnp.arange(3)).dtype
        assert lazy.stats.traces == 2
    finally:
        jax.config.update("jax_enable_x64", False)
    lazy(x)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


def test_jax_promotion_settings_are_part_of_the_key():
    """Rank and dtype promotion modes change what jax.numpy does (raise, or promote): a graph
    traced under 'allow'/'standard' must not replay under 'raise'/'strict', where eager raises."""
    add = lazytrace.trace_graph(lambda x, y: x + y)
    vec, mat = jnp.ones(3), jnp.ones((2, 3))
    ints, floats = jnp.ones(3, jnp.int32), jnp.ones(3, jnp.float32)
    add(vec, mat), add(vec, mat), add(ints, floats), add(ints, floats)
    with jax.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError, match="rank_promotion"):
            add(vec + 1, mat)
    with jax.numpy_dtype_promotion("strict"):
        with pytest.raises(jax.dtypes.TypePromotionError):
            add(ints + 1, floats)
    assert np.array_equal(add(vec + 1, mat), vec + 1 + mat) and add.stats.hits == 3


def test_key_reuse_checker_runs_eagerly_and_raises_like_eager():
    """jax_debug_key_reuse checks keys in JAX's eager dispatch: a trace and a graph bypass it, so
    a function reusing a key must raise KeyReuseError through the LazyGraph as it does eagerly."""
    def reuses(key, x):
        return x + jax.random.normal(key, x.shape) + jax.random.normal(key, x.shape)

    def splits(key, x):
        k1, k2 = jax.random.split(key)
        return x + jax.random.normal(k1, x.shape) + jax.random.normal(k2, x.shape)

    lazy_reuses, lazy_splits = lazytrace.trace_graph(reuses), lazytrace.trace_graph(splits)
    x = jnp.ones(3)
    jax.config.update("jax_debug_key_reuse", True)
    try:
        for seed in range(2):
            with pytest.raises(jax.errors.KeyReuseError):
                lazy_reuses(jax.random.key(seed), x)
            assert np.array_equal(lazy_splits(jax.random.key(seed), x), splits(jax.random.key(seed), x))
    finally:
        jax.config.update("jax_debug_key_reuse", False)
    assert "key_reuse" in next(iter(lazy_splits.stats.reasons))


NP_WEIGHTS = np.ones(3, dtype=np.float32)


def test_numpy_array_given_to_jnp_asarray_is_checked_not_baked():
    """jnp.asarray of a global NumPy table made a JAX constant of its trace-time contents: a
    later in-place write (same object, so the identity check of globals passes) was not seen."""
    def weighted(x):
        return x * jnp.asarray(NP_WEIGHTS)

    def fresh_table(x):        # a table made inside: the same contents at every call, stays a hit
        return x * jnp.asarray(np.array([0.25, 0.5, 2.0], dtype=np.float32))

    lazy, fresh = lazytrace.trace_graph(weighted), lazytrace.trace_graph(fresh_table)
    x = jnp.arange(3.0)
    try:
        for step in range(3):
            NP_WEIGHTS[:] = step + 1
            assert np.array_equal(lazy(x), weighted(x)) and np.array_equal(fresh(x + step), fresh_table(x + step))
        assert lazy.stats.traces == 3 and fresh.stats.hits == 2
    finally:
        NP_WEIGHTS[:] = 1


def test_donating_jit_keeps_graph_constants_and_donates_inputs():
    """A jit that donates its first argument, given a constant of the graph: the first replay
    deleted the constant and every later call failed over to eager. The function's own input,
    donated, is deleted as eager deletes it."""
    donating = jax.jit(lambda a, b: a * 2 + b, donate_argnums=0)

    def on_constant(x):
        return donating(jnp.arange(3.0), x)

    def on_input(x):
        return donating(x, 1.0)

    lazy_constant, lazy_input = lazytrace.trace_graph(on_constant), lazytrace.trace_graph(on_input)
    for step in range(3):
        x = jnp.ones(3) * step
        assert np.array_equal(lazy_constant(x), on_constant(x))
        mine, theirs = jnp.ones(3) * step, jnp.ones(3) * step
        assert np.array_equal(lazy_input(mine), on_input(theirs)) and mine.is_deleted() == theirs.is_deleted()
    assert lazy_constant.stats.hits == 2 and lazy_constant.stats.eager == 0 and lazy_input.stats.hits == 2


def test_jax_matmul_precision_context_is_part_of_the_key():
    matmul = lazytrace.trace_graph(lambda x, y: x @ y)
    x, y = jax.random.normal(jax.random.key(0), (64, 64)), jax.random.normal(jax.random.key(1), (64, 64))
    matmul(x, y), matmul(x, y)
    with jax.default_matmul_precision("bfloat16"):
        assert np.array_equal(matmul(y, x), y @ x)
        assert matmul.stats.traces == 2
    assert np.array_equal(matmul(y, x), y @ x) and matmul.stats.traces == 2


def test_retrace_explanations_describe_each_jax_setting_and_shape():
    """Signature descriptions are memoized per global state and per (shape, dtype): each trace
    of a new LazyGraph, and each retrace, still names its own precision and shape."""
    for _ in range(2):                                   # the second LazyGraph reuses the memos
        matmul = lazytrace.trace_graph(lambda x, y: x @ y)
        x, y = jnp.ones((4, 4)), jnp.ones((4, 4))
        matmul(x, y)
        with jax.default_matmul_precision("bfloat16"):
            matmul(x, y)
        matmul(jnp.ones((2, 4)), y)
        first, second, third = matmul.traces
        precision = "jax.config.jax_default_matmul_precision"
        assert first.signature["args[0]"] == "4x4 float32" and first.signature[precision] == "None"
        assert [str(c) for c in second.changes] == [f"{precision}: None -> 'bfloat16'"]
        assert [str(c) for c in third.changes] == ["args[0]: 4x4 float32 -> 2x4 float32"]


@pytest.fixture
def xla_compiles():
    """Names of the XLA compilations made while the test runs (jax.monitoring events)."""
    count = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            count.append(event)
    jax.monitoring.register_event_duration_secs_listener(listener)
    yield count
    jax.monitoring.unregister_event_duration_listener(listener)


def test_a_trace_after_eager_calls_compiles_nothing_new(xla_compiles):
    """Indexing runs as eager runs it (a dynamic_slice compiled once per shape, not a static
    slice per index), and stop_gradient returns its argument: the trace reuses eager's work."""
    def fn(x):
        k = jnp.exp(x[0]) + x[1] * x[2]
        return jax.lax.stop_gradient(k) + jax.nn.softmax(x[3:], axis=-1).sum(0)

    x = jnp.arange(40.0).reshape(5, 8) / 40
    fn(x)
    del xla_compiles[:]
    lazy = lazytrace.trace_graph(fn)
    assert np.array_equal(lazy(x), fn(x))
    assert xla_compiles == []
    for x2 in (x + 1, x * -2):
        assert np.array_equal(lazy(x2), fn(x2))
    assert lazy.stats.hits == 2


def test_stop_gradient_in_a_graph_stops_gradients_applied_from_outside():
    def fn(x):
        return jnp.sum(jax.lax.stop_gradient(x * x) * x + x[0] * x[1])

    lazy = lazytrace.trace_graph(fn)
    x = jnp.array([1.0, 2.0, 3.0])
    lazy(x)
    for x2 in (x + 1, x * 3):
        assert np.array_equal(jax.grad(lazy)(x2), jax.grad(fn)(x2))
        assert np.array_equal(lazy(x2), fn(x2))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3     # arrays, and grad's tracers: replayed


def test_jitted_functions_are_recorded_as_the_eager_call():
    """A jax.jit function (all of jax.numpy's are) is recorded as called, static arguments and
    keywords included: the trace and every replay run it through eager's own C++ dispatch."""
    @jax.jit
    def scaled(a, parts, *, bias):
        return a * parts[0] + parts[1] * bias, a - bias

    def power(a, n):
        return a ** n

    power = jax.jit(power, static_argnums=1)

    def fn(x):
        y, z = scaled(x, [x + 1, jnp.float32(2)], bias=x[0])
        return power(y, 3) + jnp.sum(z, axis=0, keepdims=True)

    lazy = lazytrace.trace_graph(fn)
    x = jnp.arange(6.0).reshape(2, 3)
    assert np.array_equal(lazy(x), fn(x))
    for x2 in (x + 1, x * -3):
        assert np.array_equal(lazy(x2), fn(x2))
    assert lazy.stats.hits == 2 and lazy.stats.traces == 1
    source = lazy.graph_for(x).source
    assert "power(" in source and "scaled(" in source, source


def test_jitted_closures_are_told_apart():
    """Jitted closures of one code over different values, made and dropped one after another
    (object ids are reused): each graph calls its own."""
    import gc

    results = []
    for c in range(4):
        times = jax.jit(lambda a, c=float(c): a * c + c)
        lazy = lazytrace.trace_graph(lambda x, f=times: f(x) - 1)
        lazy(jnp.ones(3))
        results.append(lazy(jnp.arange(3.0)))
        del times, lazy
        gc.collect()
    for c, got in enumerate(results):
        assert np.array_equal(got, jnp.arange(3.0) * c + c - 1)


def test_jitted_calls_over_tracers_jax_cannot_show_stay_primitives():
    """A jitted closure over an array of the trace, an array inside another pytree node, a
    dict result: recorded as the primitive, whose inputs JAX lists, not baked in."""
    from dataclasses import dataclass

    @jax.tree_util.register_dataclass
    @dataclass
    class Box:
        value: jax.Array

    unbox = jax.jit(lambda box: box.value * 2)
    named = jax.jit(lambda a: {"twice": a * 2})

    def fn(x):
        y = x * 3
        closure = jax.jit(lambda a: a + y)
        return closure(x) + unbox(Box(x + 1)) + named(x - 1)["twice"]

    lazy = lazytrace.trace_graph(fn)
    x = jnp.arange(3.0)
    assert np.array_equal(lazy(x), fn(x))
    for x2 in (x + 1, x * -2):
        assert np.array_equal(lazy(x2), fn(x2))
    assert lazy.stats.hits == 2


def test_custom_derivative_functions_run_as_eager_runs_them(xla_compiles):
    """jax.nn.relu and a user's custom_vjp function are called as eager calls them: a trace
    after eager calls compiles nothing (it staged and compiled each one at every trace), and
    gradients through the graph use their rules."""
    @jax.custom_vjp
    def clipped(a):
        return a * 1.0

    clipped.defvjp(lambda a: (a * 1.0, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))

    def fn(x):
        return jnp.sum(jax.nn.relu(x) * 3 + clipped(x) * 2)

    x = jnp.linspace(-1.0, 1.0, 6)
    fn(x), jax.grad(fn)(x)
    del xla_compiles[:]
    lazy = lazytrace.trace_graph(fn)
    assert np.array_equal(lazy(x), fn(x))
    assert xla_compiles == []
    for x2 in (x + 0.5, x * -2):
        assert np.array_equal(lazy(x2), fn(x2))
        assert np.array_equal(jax.grad(lazy)(x2), jax.grad(fn)(x2))
    assert lazy.stats.hits >= 2


def test_custom_derivative_closure_over_a_trace_array_is_not_baked():
    """A custom_jvp function made inside, closing over an array of the trace: never replayed
    with the trace's array (JAX refuses the escaped tracer: the call runs eagerly)."""
    def fn(x):
        y = x * 2

        @jax.custom_jvp
        def scaled(a):
            return a * y

        scaled.defjvp(lambda primals, tangents: (primals[0] * y, tangents[0] * y))
        return scaled(x) + 1

    lazy = lazytrace.trace_graph(fn)
    x = jnp.arange(3.0)
    assert np.array_equal(lazy(x), fn(x))
    for x2 in (x + 1, x * -3):
        assert np.array_equal(lazy(x2), fn(x2))


def test_operators_record_the_call_jax_operators_make():
    """Arithmetic operators on tracers are recorded as the jax.numpy call JAX's operator makes
    (reflected ones with the operands swapped); other operands take JAX's own path."""
    def fn(x, y):
        z = (2.0 - x) / (1 + y) ** 2 + 3 * x - x ** 0.5 * y / 2
        z = z + 2 ** y - 1.5 / (x + 1) + x * np.float32(2) + x * True + y * jnp.ones(3, jnp.int32)
        return z + (x > 1) * 1 + np.arange(3.0) * x

    lazy = lazytrace.trace_graph(fn)
    x, y = jnp.arange(1.0, 4.0), jnp.array([0.5, -0.25, 2.0])
    assert np.array_equal(lazy(x, y), fn(x, y))
    for x2, y2 in ((x + 1, y * 2), (x * 3, -y)):
        got, want = lazy(x2, y2), fn(x2, y2)
        assert np.array_equal(got, want) and got.dtype == want.dtype
    assert lazy.stats.hits == 2
    with pytest.raises(TypeError):
        lazytrace.trace_graph(lambda x: x + [1, 2])(x)


def test_indexing_with_static_and_array_indices():
    """Static indices and a traced index replay as eager indexes; a boolean mask (a shape that
    depends on its values) runs eagerly."""
    def fn(x):
        return x[0] + x[1, 1:3].sum() + x[..., None][2, ::2, 0].sum() * x[-1] + x[1][jnp.argmax(x[2])]

    lazy = lazytrace.trace_graph(fn)
    x = jnp.arange(12.0).reshape(3, 4)
    assert np.array_equal(lazy(x), fn(x))
    for x2 in (x[::-1] * 2, -x):
        assert np.array_equal(lazy(x2), fn(x2))
    assert lazy.stats.hits == 2
    masked = lazytrace.trace_graph(lambda x: x[x > 2].sum())
    for x2 in (x, x - 5):
        assert np.array_equal(masked(x2), x2[x2 > 2].sum())
    assert masked.stats.eager == 2


def _through_jax_api(x):
    import jax.numpy as jnp
    return jnp.sin(x) + jax.nn.relu(x - 0.5) + _imported_cos(x)


from jax.numpy import cos as _imported_cos     # noqa: E402  (a global of this module the function reads)


@pytest.mark.parametrize("replaced", ["jax.numpy.sin", "jax.nn.relu", f"{__name__}._imported_cos"])
def test_a_jax_function_replaced_after_the_trace_is_called_as_eager_calls_it(replaced, monkeypatch):
    """A JAX graph records the primitives below jnp.sin, so it names no jnp function: one the traced
    code read (`jnp.sin`, `jax.nn.relu`, `from jax.numpy import cos`), replaced after the trace,
    was never seen (the graph replayed the old one); now the signature traces again."""
    import sys
    lazy = lazytrace.trace_graph(_through_jax_api)
    for _ in range(2):
        x = jax.numpy.asarray(np.random.rand(3))
        assert np.array_equal(lazy(x), _through_jax_api(x))
    module_name, _, name = replaced.rpartition(".")
    with monkeypatch.context() as patch:
        patch.setattr(sys.modules[module_name], name, lambda t: t * 0 + 100)
        for _ in range(2):
            x = jax.numpy.asarray(np.random.rand(3))
            assert np.array_equal(lazy(x), _through_jax_api(x))
        assert lazy.stats.traces == 2
    x = jax.numpy.asarray(np.random.rand(3))
    assert np.array_equal(lazy(x), _through_jax_api(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3


def test_a_trace_that_raises_leaves_jax_tracing_as_it_found_it():
    """intercept hands the session JAX's own set_current_trace object: the trace current before is
    current again after a trace that raised, and a later eager call gives an array, not a tracer."""
    from jax._src import core

    def bad(x):
        y = jnp.sin(x) * 2.0
        raise ValueError("the function's own error")

    before = core.unsafe_get_current_trace()
    x = jnp.arange(4.0)
    with pytest.raises(ValueError, match="own error"):
        lazytrace.trace_graph(bad)(x)
    assert core.unsafe_get_current_trace() is before
    out = jnp.sin(x) * 2.0
    assert isinstance(out, jax.Array) and not isinstance(out, core.Tracer)
