"""Session 15 red-team review (review15a) of meta15 (torch metadata reads of keyed arrays answered by
TraceSession.on_metadata, _lift handing run the arrays it found, reads.on_call's walked-frame table)
and tf15 (TensorFlow's op callback out of the thread's list while a recorded call runs). Each probe
compares a LazyGraph with eager code on new inputs (results, inputs after the call, exceptions)."""
import threading

import pytest

import lazytrace

torch = pytest.importorskip("torch")


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            a.stride() == b.stride() and a.requires_grad == b.requires_grad and torch.equal(a.detach(), b.detach())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _like_eager(fn, *calls, clone=True):
    """Each call's arguments (copies where `clone`) through a LazyGraph of fn and through fn: equal
    results and arguments after the call, or the same exception type; the graph."""
    lazy = lazytrace.trace_graph(fn)
    for args in calls:
        ea = [a.clone() if clone and isinstance(a, torch.Tensor) else a for a in args]
        la = [a.clone() if clone and isinstance(a, torch.Tensor) else a for a in args]
        try:
            expected = fn(*ea)
        except Exception as exc:
            with pytest.raises(type(exc)):
                lazy(*la)
            continue
        got = lazy(*la)
        assert _same(got, expected), (got, expected)
        assert _same(la, ea), (la, ea)
    return lazy


_G = torch.ones(3)


@pytest.fixture
def g3():
    yield _G
    _G.resize_(3)
    _G.fill_(1.0)


# -- fixed here: an array given another's metadata by an in-place call (`y.data = g`, resize_as_)

def _data_swap(x):
    y = x * 1
    y.data = _G
    return y.shape[0] + x * 0, y.sum()


def _resize_as(x):
    y = x * 1
    y.resize_as_(_G)
    return y.shape[0] + x[:1] * 0


def _input_data_swap(x):
    x.data = _G
    return x.shape[0] * 1.0


@pytest.mark.parametrize("fn", [_data_swap, _resize_as, _input_data_swap])
def test_an_array_given_a_global_arrays_metadata_is_guarded(fn, g3):
    lazy = lazytrace.trace_graph(fn)
    for n in (3, 3, 5, 2, 3):
        g3.resize_(n)
        g3.fill_(1.0)
        assert _same(lazy(torch.rand(2)), fn(torch.rand(2)))
    assert lazy.stats.hits >= 1 or fn is _input_data_swap     # (its result is the shape read: eager)


def test_an_array_given_a_data_dependent_shape_by_a_data_swap_is_guarded():
    def f(x):
        y = x * 1
        y.data = x[x > 0.5]
        return y.shape[0] + x * 0
    _like_eager(f, (torch.tensor([0.1, 0.9, 0.7]),), (torch.tensor([0.1, 0.2, 0.7]),),
                (torch.tensor([0.9, 0.9, 0.7]),), (torch.tensor([0.1, 0.2, 0.7]),))


# -- fixed here: an op callback the function adds (tf.debugging.enable_check_numerics) fails the trace

def _tf():
    return pytest.importorskip("tensorflow", reason="tensorflow is not installed")


def _op_callbacks():
    from tensorflow.python.eager import context
    return list(context.context().op_callbacks)


def test_check_numerics_enabled_inside_the_function_raises_as_in_eager():
    tf = _tf()
    import numpy as np

    def f(x):
        tf.debugging.enable_check_numerics()
        try:
            return tf.math.log(x) * 2.0
        finally:
            tf.debugging.disable_check_numerics()
    lazy = lazytrace.trace_graph(f)
    for x in (tf.ones((3,)), tf.ones((3,)) * 2):
        np.testing.assert_allclose(lazy(x), f(x))
    for _ in range(2):
        with pytest.raises(tf.errors.InvalidArgumentError):
            f(tf.constant([-1.0, 1.0, 1.0]))
        with pytest.raises(tf.errors.InvalidArgumentError):
            lazy(tf.constant([-1.0, 1.0, 1.0]))
    assert _op_callbacks() == []
    assert any("op callbacks changed" in reason for reason in lazy.stats.reasons)


# -- fixed here: the metadata of an array computed from a global one (resized in place between calls)

def _from_global(x):
    y = _G * 2                  # its shape is _G's, which no key fixes
    v = _G[1:]                  # a view of it
    return x * y.shape[0] + len(y) + v.numel() + v.stride()[0], torch.zeros_like(_G).dim()


def test_the_metadata_of_an_array_made_from_a_global_one_is_guarded(g3):
    lazy = lazytrace.trace_graph(_from_global)
    for n in (3, 3, 7, 2, 3):
        g3.resize_(n)
        x = torch.rand(2)
        assert _same(lazy(x), _from_global(x))
    g3.resize_(2, 4)
    x = torch.rand(2)
    assert _same(lazy(x), _from_global(x))
    assert lazy.stats.hits >= 1
