"""NumPy specifics: RNG generators as inputs, escapes, `to=`, the compiler switch."""
import numpy as np
import pytest
import torch

import lazytrace


def test_generator_arguments_draw_fresh_values_like_eager():
    def fn(x, rng):
        return x + rng.normal(size=x.shape) + rng.integers(0, 10, size=x.shape)

    lazy = lazytrace.trace_graph(fn)
    x = np.zeros(4)
    lazy(x, np.random.default_rng(0))
    out = lazy(x, np.random.default_rng(42))
    assert lazy.stats.hits == 1
    assert np.array_equal(out, fn(x, np.random.default_rng(42)))
    rng = np.random.default_rng(1)
    assert not np.array_equal(lazy(x, rng), lazy(x, rng))      # the generator advances


def test_methods_operators_and_indexing_are_traced():
    def fn(x):
        y = (x.T @ x).clip(0, 2.5)
        y[0, :] = -1.0
        return y.astype(np.float32).mean(axis=1), abs(-y).max(), y[y > 0.5].sum()

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = np.random.default_rng(seed).random((4, 3))
        got, expected = lazy(x), fn(x)
        assert all(np.allclose(g, e) for g, e in zip(got, expected))
    assert lazy.stats.hits == 2


def test_to_names_the_framework_of_the_graph():
    graph = lazytrace.trace_graph(lambda x: x + 1, to="numpy", args=(np.ones(2),))
    assert "numpy" in graph.backend.name
    with pytest.raises(ValueError, match="unknown framework"):
        lazytrace.trace_graph(lambda x: x, to="mxnet")
    graph = lazytrace.trace_graph(lambda x: x + 1, to="numpy", args=(torch.ones(2),))
    assert np.array_equal(graph(torch.zeros(2)), np.ones(2, dtype=np.float32))   # converted at the boundary
    lazy = lazytrace.trace_graph(lambda x: x + 1, to="numpy")
    lazy(torch.ones(2))
    assert np.array_equal(lazy(torch.ones(2)), np.full((2,), 2.0, dtype=np.float32))
    assert lazy.stats.hits == 1


def test_mixed_frameworks_without_to_are_refused_clearly():
    lazy = lazytrace.trace_graph(lambda a, b: a)
    with pytest.raises(TypeError, match="mix arrays of several frameworks"):
        lazy(np.ones(2), torch.ones(2))


def test_return_backend_traced_fn_is_a_documented_no_op():
    with pytest.warns(UserWarning, match="NumPy has no compiler"):
        graph = lazytrace.trace_graph(lambda x: x * 2, args=(np.ones(3),), return_backend_traced_fn=True)
    assert np.array_equal(graph(np.arange(3.0)), np.arange(3.0) * 2)


def test_out_arguments_and_inplace_methods_are_replayed():
    def fn(x, buf):
        np.multiply(x, 2, out=buf)
        buf.sort()
        return buf + 1

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = np.random.default_rng(seed).random(5)
        b1, b2 = np.empty(5), np.empty(5)
        assert np.array_equal(lazy(x, b1), fn(x, b2)) and np.array_equal(b1, b2)
    assert lazy.stats.hits == 2


@pytest.mark.parametrize("make_count", [
    lambda x: np.bincount(x).shape[0],            # length = max value + 1
    lambda x: len(np.where(x > 1)[0]),            # one-argument where
    lambda x: np.repeat(x, x).size,               # counts from the data
])
def test_shapes_of_intermediates_are_guarded(make_count):
    def fn(x):
        return x * make_count(x)

    lazy = lazytrace.trace_graph(fn)
    for values in ([0, 1, 2], [0, 1, 5], [0, 1, 2], [3, 3, 3]):
        x = np.array(values)
        assert np.array_equal(lazy(x), fn(x)), values
    assert lazy.stats.hits >= 1                    # repeated data replays its graph


def _stacked_scalars(x):
    return np.array([x.sum(), x.max()]) * 2         # the array protocol on NumPy scalars


def _pickled(x):
    import pickle
    return pickle.loads(pickle.dumps(x * 2)) + 1


def _saved_and_loaded(x):
    import io
    buf = io.BytesIO()
    np.save(buf, x * 2)
    buf.seek(0)
    return np.load(buf) + 1                         # made by a call lazytrace cannot see


@pytest.mark.parametrize("fn", [_stacked_scalars, _pickled, _saved_and_loaded])
def test_data_leaving_through_the_array_protocol_pickle_or_files_runs_eagerly(fn):
    """np.array of NumPy scalars raised 'object __array__ method not producing an array' and
    pickling a tracer raised; np.save into a buffer read back replayed the traced data."""
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = np.random.default_rng(seed).random(4)
        assert np.array_equal(lazy(x), fn(x))
    assert lazy.stats.hits == 0 and lazy.stats.eager == 3


def test_the_type_of_an_input_passed_to_numpy_is_the_array_class():
    """`x.view(type(x))` (subclass-preserving code): type() of a tracer is the tracer class, which
    NumPy took for a dtype and raised 'Cannot change data-type for array of references'."""
    def viewed(x):
        return x.view(type(x)) * 2 + x.view(x.__class__)

    lazy = lazytrace.trace_graph(viewed)
    for seed in range(3):
        x = np.random.default_rng(seed).random(3)
        out = lazy(x)
        assert type(out) is np.ndarray and np.array_equal(out, x * 3)
    assert lazy.stats.hits == 2


def test_bytes_of_an_input_are_its_data_read_back():
    """bytes(x) reads an ndarray's buffer; a tracer has none, so bytes() iterated its items and
    raised TypeError at the first call. The bytes are now read back (checked at every call)."""
    def digest(x):
        return x * (len(bytes(x)) + bytes(x)[0])

    lazy = lazytrace.trace_graph(digest)
    for seed in range(3):
        x = np.random.default_rng(seed).random(3)
        assert np.array_equal(lazy(x), digest(x))
    x = np.random.default_rng(0).random(3)
    assert np.array_equal(lazy(x), digest(x)) and lazy.stats.hits == 1


def test_arrays_a_traced_method_stores_in_its_objects_containers_are_arrays():
    """trace_graph(obj.method) records obj's attributes; an array the method put in a dict it
    holds (`self.acts["a"] = y`) stayed a tracer after each trace."""
    class Model:
        def __init__(self):
            self.acts = {}

        def forward(self, x):
            self.acts["a"] = x * 7
            return x + 1

    model = Model()
    lazy = lazytrace.trace_graph(model.forward)
    for seed in range(3):
        x = np.random.default_rng(seed).random(3)
        assert np.array_equal(lazy(x), x + 1)
        assert type(model.acts["a"]) is np.ndarray and np.array_equal(model.acts["a"], x * 7)


def _with_reciprocals(x):
    return x * 2 + np.ones(3) / np.arange(3.0)        # a constant whose computation divides by zero


def _assert_errstate_followed(fn, mode: str, match: str) -> lazytrace.LazyGraph:
    """Replays of `fn` under np.errstate({mode}="ignore") equal eager; under "raise" they raise
    FloatingPointError as eager does (the graph's inf or nan came from a computation it made once)."""
    lazy = lazytrace.trace_graph(fn)
    with np.errstate(**{mode: "ignore"}):
        for seed in range(2):
            x = np.random.default_rng(seed).random(3)
            assert np.array_equal(lazy(x), fn(x))
        assert lazy.stats.hits == 1
    with np.errstate(**{mode: "raise"}):
        for seed in range(3):
            with pytest.raises(FloatingPointError, match=match):
                lazy(np.random.default_rng(seed).random(3))
    return lazy


def test_errstate_around_a_replay_of_a_constant_that_divided_by_zero():
    """Eager code divides by zero at every call (np.errstate decides: ignore, warn or raise); a
    graph computed that constant once: a graph holding inf or nan checks the error modes, so
    np.errstate(divide="raise") around a later call raises FloatingPointError as eager does."""
    lazy = _assert_errstate_followed(_with_reciprocals, "divide", "divide by zero")
    with np.errstate(divide="ignore"):
        x = np.random.default_rng(5).random(3)
        assert np.array_equal(lazy(x), _with_reciprocals(x))
    assert lazy.stats.hits == 2 and lazy.stats.guard_failures == 3
    finite = lazytrace.trace_graph(lambda x: x * 2 + np.ones(3) / np.arange(1.0, 4.0))
    finite(np.ones(3))
    assert "hold()" not in finite.graph_for(np.ones(3)).source        # no check without inf or nan


def _with_overflowed_scalar(x):
    return x + np.float64(1e308) * 10       # NumPy scalar arithmetic in Python: no call shows it


def test_errstate_around_a_replay_of_a_numpy_scalar_literal_that_overflowed():
    """A NumPy scalar the Python code computed (inf from an overflow) reaches a call as a literal,
    not as a constant: the graph checks the error modes for it too, so np.errstate(over="raise")
    around a later call raises FloatingPointError as eager does (the graph returned inf)."""
    _assert_errstate_followed(_with_overflowed_scalar, "over", "overflow")
