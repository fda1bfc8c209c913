"""Red team 10: framework settings changed between or around calls, concurrency inside traced
functions, whole-library proxies; each compared with eager on new inputs."""
import numpy as np
import pytest

import lazytrace

torch = pytest.importorskip("torch")


def _rand(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def deterministic_algorithms():
    def set_mode(on):
        torch.use_deterministic_algorithms(on)
    yield set_mode
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("fn", [lambda x: torch.empty_like(x), lambda x: x + torch.empty(3),
                                lambda x: x.new_empty(2)], ids=["empty_like", "empty", "new_empty"])
def test_uninitialized_memory_is_nan_under_deterministic_algorithms_as_in_eager(fn, deterministic_algorithms):
    """torch.use_deterministic_algorithms(True) fills uninitialized memory with NaN
    (torch.utils.deterministic.fill_uninitialized_memory): a constant folded from torch.empty
    under the default mode must not replay there; the mode is part of the key."""
    lazy = lazytrace.trace_graph(fn)
    lazy(_rand(3, seed=0)), lazy(_rand(3, seed=1))
    deterministic_algorithms(True)
    for seed in range(2, 5):
        x = _rand(3, seed=seed)
        expected = fn(x)
        assert expected.isnan().all()
        out = lazy(x)
        assert out.isnan().all() and out.dtype == expected.dtype and out.shape == expected.shape
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3
    assert "use_deterministic_algorithms" in lazy.explain()
    deterministic_algorithms(False)
    lazy(_rand(3, seed=5))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 4


def test_deterministic_algorithms_switched_inside_the_function_runs_eagerly(deterministic_algorithms):
    """A graph cannot replay torch.use_deterministic_algorithms (no call shows it): the setting the
    function leaves must be eager's after every call."""
    def switches(x):
        torch.use_deterministic_algorithms(True)
        return x + torch.empty(3)

    lazy = lazytrace.trace_graph(switches)
    for seed in range(3):
        deterministic_algorithms(False)
        out = lazy(_rand(3, seed=seed))
        assert torch.are_deterministic_algorithms_enabled() and out.isnan().all()
    assert lazy.stats.hits == 0


def test_keras_floatx_changed_between_calls_is_part_of_a_tensorflow_key():
    """keras.ops make their tensors of keras's floatx, read in Python inside keras (no op shows
    it): `keras.ops.ones(3)` folded as float32 must not replay after set_floatx('float64'), where
    eager makes float64 (and adding it to a float32 input raises)."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

    def fn(x):
        return keras.ops.add(x, 1.0) * keras.ops.ones((3,))

    lazy = lazytrace.trace_graph(fn)
    rng = np.random.default_rng(0)
    for _ in range(2):
        x32 = tf.constant(rng.random(3).astype(np.float32))
        assert np.array_equal(lazy(x32).numpy(), fn(x32).numpy())
    keras.config.set_floatx("float64")
    try:
        for _ in range(3):
            x32 = tf.constant(rng.random(3).astype(np.float32))
            with pytest.raises(tf.errors.InvalidArgumentError):
                fn(x32)
            with pytest.raises(tf.errors.InvalidArgumentError):
                lazy(x32)
            x = tf.constant(rng.random(3))
            expected = fn(x)
            out = lazy(x)
            assert out.dtype == expected.dtype == tf.float64 and np.array_equal(out.numpy(), expected.numpy())
    finally:
        keras.config.set_floatx("float32")
    x32 = tf.constant(rng.random(3).astype(np.float32))
    assert np.array_equal(lazy(x32).numpy(), fn(x32).numpy())
    assert "floatx" in lazy.explain() and lazy.stats.hits >= 3


class _HoldsArray(Exception):
    def __init__(self, array, message):
        super().__init__(message)
        self.array = array


_FILLED = []


def _raises_with_arrays(x):
    y = x * 2
    _FILLED.append(y)
    try:
        raise KeyError(y + 1)
    except KeyError as exc:
        raise _HoldsArray(y, "bad input") from exc


@pytest.mark.parametrize("framework", ["numpy", "jax", "tensorflow"])
def test_an_exception_raised_at_a_trace_holds_arrays_as_eagers_does(framework):
    """The first call's exception propagates unchanged: the arrays it holds (its args, its
    attributes, its __cause__'s, a global the function filled before raising) are the
    framework's arrays, not the tracer objects the function was handed."""
    if framework == "numpy":
        array_type, make = np.ndarray, np.asarray
    elif framework == "jax":
        jnp = pytest.importorskip("jax.numpy")
        array_type, make = type(jnp.ones(1)), jnp.asarray
    else:
        tf = pytest.importorskip("tensorflow")
        array_type, make = type(tf.ones(1)), tf.constant
    lazy = lazytrace.trace_graph(_raises_with_arrays)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = make(rng.random(3).astype(np.float32))
        _FILLED.clear()
        with pytest.raises(_HoldsArray, match="bad input") as info:
            lazy(x)
        exc = info.value
        for held, expected in ((exc.array, x * 2), (exc.__cause__.args[0], x * 2 + 1), (_FILLED[0], x * 2)):
            assert type(held) is array_type
            assert np.array_equal(np.asarray(held), np.asarray(expected))


@pytest.mark.parametrize("options, message", [
    (dict(static_argnames=3), "static_argnames takes parameter names"),
    (dict(kwarg_stateful_idxs=[0]), "kwarg_stateful_idxs takes parameter names"),
    (dict(args=np.ones(2)), "args= takes a tuple"),
    (dict(args=(np.ones(2),), kwargs=[("y", 1)]), "kwargs= a dict"),
])
def test_bad_options_are_refused_naming_the_option(options, message):
    with pytest.raises(TypeError, match=message):
        lazytrace.trace_graph(lambda x, y=1: x * y, **options)


def _divides_by_zero(x):
    return x / 0.0


def _softmax_without_dim(x):
    return torch.nn.functional.softmax(x)       # torch warns: implicit dim (stacklevel: the caller)


@pytest.mark.parametrize("fn, make, category", [
    (_divides_by_zero, lambda seed: np.random.default_rng(seed).random(3), RuntimeWarning),
    (_softmax_without_dim, lambda seed: _rand(3, seed=seed), UserWarning)], ids=["numpy", "torch"])
def test_a_warning_filter_naming_the_callers_module_applies_as_in_eager(fn, make, category):
    """A warning a framework call issues is the calling code's, in eager code: a filter naming
    its module (pytest's `error::RuntimeWarning:mymodule`) makes it an error. So it is for the
    trace (the call is made from a frame of the caller's module, file and line) and the graph
    (its code runs in the traced function's module)."""
    import warnings
    lazy, traced = lazytrace.trace_graph(fn), lazytrace.trace_graph(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced(make(0)), traced(make(1))           # a graph, traced without the filter
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=category, module=__name__)
        for seed in range(3):
            x = make(seed)
            with pytest.raises(category):
                fn(x)
            with pytest.raises(category):
                lazy(x)
            with pytest.raises(category):
                traced(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lazy(make(4)), traced(make(5))
    assert [w.category for w in caught] == [category, category]


@pytest.mark.parametrize("body, make", [
    ("x / 0.0", lambda: np.random.default_rng(0).random(3)),
    ("torch.nn.functional.softmax(x)", lambda: _rand(3, seed=0))], ids=["numpy", "torch"])
def test_a_warning_names_the_file_of_the_calling_code_when_equal_code_came_from_another_file(body, make):
    """One source compiled under two file names into one module (a notebook cell run again) makes
    equal code objects: a warning a traced call issues names the file of the code that made the
    call, as in eager code (the placed callers are told apart by code object, not by equality)."""
    import warnings
    namespace = {"torch": torch, "__name__": "cells"}
    fns = []
    for filename in ("<cell 1>", "<cell 2>"):
        exec(compile(f"def f(x):\n    return {body}\n", filename, "exec"), namespace)
        fns.append(namespace["f"])
    assert fns[0].__code__ == fns[1].__code__ and fns[0].__code__ is not fns[1].__code__
    for fn, filename in zip(fns, ("<cell 1>", "<cell 2>")):
        for call in (fn, lazytrace.trace_graph(fn)):        # eager, then the trace
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call(make())
            assert [(w.filename, w.lineno) for w in caught] == [(filename, 2)]


def test_calls_waiting_for_another_threads_trace_are_counted_once():
    """Concurrent first calls of one signature trace once; the calls that waited for that trace
    are each one call (stats.calls == hits + traces + eager calls)."""
    import threading
    started = threading.Event()

    def slow(x):
        started.set()
        threading.Event().wait(0.3)         # the other threads arrive while this one traces
        return x * 2

    lazy = lazytrace.trace_graph(slow)
    x = _rand(3, seed=0)
    first = threading.Thread(target=lazy, args=(x,))
    first.start()
    started.wait()
    others = [threading.Thread(target=lazy, args=(x,)) for _ in range(3)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join()
    stats = lazy.stats
    assert stats.traces == 1 and stats.calls == 4 == stats.hits + stats.traces + stats.eager


def _checks_then_scales(az, srange):
    if (srange < 0).any():                  # of a 0-d array: a NumPy bool scalar's .any()
        raise ValueError("negative range")
    return srange * np.sin(np.radians(az))


def _reads_memory_then_scales(r):
    np.asarray(r)                           # an escape: the call runs eagerly
    return r * 2.0, np.sin(r)


@pytest.mark.parametrize("fn", [_checks_then_scales, _reads_memory_then_scales])
def test_numpy_scalars_made_from_0d_arrays_are_scalars_as_in_eager(fn):
    """A 0-d array's operators give NumPy scalars (pymap3d's aer2enu on 0-d inputs): their
    methods work under the trace (np.ndarray.any does not take an np.bool_), and the first call
    returns them as scalars, not 0-d arrays, also where the call runs eagerly."""
    lazy = lazytrace.trace_graph(fn)
    rng = np.random.default_rng(0)
    for _ in range(3):
        args = [np.asarray(v) for v in rng.random(fn.__code__.co_argcount)]
        expected, out = fn(*args), lazy(*args)
        expected, out = (expected, out) if isinstance(expected, tuple) else ((expected,), (out,))
        for e, o in zip(expected, out):
            assert type(o) is type(e) is np.float64 and o == e


def _scales_by_kind(x):
    total = x.sum()
    return x * 2 if np.isscalar(total) else x * 3


def test_np_isscalar_of_a_scalar_result_answers_as_in_eager():
    lazy = lazytrace.trace_graph(_scales_by_kind)
    for seed in range(3):
        x = np.random.default_rng(seed).random(3)
        assert np.array_equal(lazy(x), _scales_by_kind(x))


def _contiguous(x):
    return np.ascontiguousarray(x)          # x itself when it is contiguous (reads its memory: eager)


def test_an_input_handed_back_by_a_call_that_runs_eagerly_is_the_inputs_memory_at_the_first_call():
    """np.ascontiguousarray(x) of a contiguous x is x: the first call (whose trace stops at the
    escape) returns x's memory, as eager does, not a copy: writes into the result reach x.
    (Not x itself: NumPy makes a new array object from the tracer's __array_struct__.)"""
    lazy = lazytrace.trace_graph(_contiguous)
    for seed in range(3):
        x = np.random.default_rng(seed).random((2, 3))
        assert _contiguous(x) is x
        out = lazy(x)
        assert np.shares_memory(out, x) and np.array_equal(out, x)
        out[0, 0] = -1.0
        assert x[0, 0] == -1.0
    assert lazy.stats.traces == 1 and lazy.stats.eager == 3


def _grid_and_its_row(x):
    grid = torch.zeros_like(x)              # a constant (reads only x's keyed metadata)
    return grid, grid[0]


def test_a_returned_constant_and_its_view_share_memory_as_in_eager():
    lazy = lazytrace.trace_graph(_grid_and_its_row)
    for seed in range(3):
        grid, row = lazy(_rand(2, 3, seed=seed))
        grid.fill_(1.0)                     # eager: the row is a view of the grid
        assert torch.equal(row, torch.ones(3))


def test_a_lazygraph_converting_to_another_framework_pickles_and_copies():
    """A LazyGraph pickles and copies as what it was made from; with to= too (the wrapt proxy
    that converts the arguments refused: 'object proxy must define __reduce__()')."""
    import copy
    import operator
    import pickle
    lazy = lazytrace.trace_graph(operator.neg, to="torch")
    x = np.random.default_rng(0).random(3)
    lazy(x)
    for other, own in ((pickle.loads(pickle.dumps(lazy)), True), (copy.copy(lazy), False),
                       (copy.deepcopy(lazy), True)):
        out = other(x)
        assert type(out) is torch.Tensor and torch.equal(out, -torch.from_numpy(x))
        assert (other.__wrapped__ is not lazy.__wrapped__) is own      # a new LazyGraph, traced anew
