"""TensorFlow APIs given tracers: the fallback dispatch the first time, TensorFlow's type-based
dispatch for the positions it registered then (lazytrace/backends/tensorflow.py `_Dispatcher`)."""
import numpy as np
import pytest

import lazytrace

tf = pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install -e '.[tensorflow]')")
from lazytrace.backends import tensorflow as tf_backend  # noqa: E402
from lazytrace.graph.ir import Kind  # noqa: E402


@pytest.fixture
def fallbacks(monkeypatch):
    """The names of the APIs TensorFlow's fallback dispatch handed to lazytrace (after a failed
    conversion), in order."""
    seen = []
    handle = tf_backend._Dispatcher.handle

    def counting(self, op, args, kwargs):
        if tf_backend._first_tracer(args, kwargs) is not None:
            seen.append(op.__name__)
        return handle(self, op, args, kwargs)
    monkeypatch.setattr(tf_backend._Dispatcher, "handle", counting)
    return seen


def _data(seed, shape=(3, 4)):
    return tf.constant(np.random.default_rng(seed).random(shape, dtype=np.float32))


def test_an_api_met_once_reaches_lazytrace_without_the_failed_conversion(fallbacks):
    def f(a):
        return tf.math.log1p(a) * tf.math.cumsum(a, axis=1) + tf.math.reduce_logsumexp(a, axis=0)

    first = lazytrace.trace_graph(f)
    first(_data(0))
    met = set(fallbacks)
    assert {"log1p", "cumsum", "reduce_logsumexp"} <= met
    fallbacks.clear()
    lazy = lazytrace.trace_graph(f)         # a fresh LazyGraph: traced again
    out = lazy(_data(1))
    assert fallbacks == [], "APIs met before came through the failed conversion again"
    assert np.allclose(out, f(_data(1)))
    new = _data(2)
    assert np.array_equal(lazy(new), f(new)) and lazy.stats.hits == 1 and lazy.stats.traces == 1
    assert np.array_equal(first(new), f(new))


def test_a_tracer_at_another_position_or_by_keyword(fallbacks):
    def by_value(a):
        return tf.clip_by_value(a, 0.25, 0.75)

    def by_bound(a, lo):
        return tf.clip_by_value(a, lo, 0.75)            # a tracer as clip_value_min (position 1)

    def by_keyword(a):
        return tf.clip_by_value(t=a, clip_value_min=0.25, clip_value_max=0.75)

    lazytrace.trace_graph(by_value)(_data(0))
    fallbacks.clear()
    lo = tf.constant(0.3)
    lazy = lazytrace.trace_graph(by_bound)
    lazy(_data(1), lo)
    assert fallbacks in ([], ["clip_by_value"])      # [] where an earlier test registered position 1
    new, lo2 = _data(3), tf.constant(0.5)
    assert np.array_equal(lazy(new, lo2), by_bound(new, lo2)) and lazy.stats.hits == 1
    fallbacks.clear()
    lazytrace.trace_graph(by_bound)(_data(4), lo)      # now registered: no failed conversion
    assert fallbacks == []
    lazy = lazytrace.trace_graph(by_keyword)
    lazy(_data(5))
    assert fallbacks == []                              # keywords are matched by position too
    assert np.array_equal(lazy(new), by_keyword(new)) and lazy.stats.hits == 1


def test_eager_calls_of_registered_apis_are_unchanged():
    x = _data(7)
    lazytrace.trace_graph(lambda a: tf.math.log1p(a) + tf.clip_by_value(a, 0.1, 0.2))(x)
    assert np.allclose(tf.math.log1p(x), np.log1p(x.numpy()))
    clipped = tf.clip_by_value(x, 0.1, 0.2)
    assert type(clipped) is type(x) and np.array_equal(clipped, np.clip(x.numpy(), 0.1, 0.2))


def test_print_is_never_dispatched_by_type():
    dispatcher = next(d for d in tf_backend.dispatch._GLOBAL_DISPATCHERS if isinstance(d, tf_backend._Dispatcher))
    dispatcher._type(tf.print, (object(),), {})
    entry = dispatcher._typed.get(id(tf.print))
    assert entry is not None and entry[1] is None


def _exp_caught(a):
    b = tf.cos(a)                       # outside the try block
    try:
        y = tf.exp(b)                   # dispatched to lazytrace, inside try/except
    except Exception:                   # noqa: BLE001 - the path a graph could not take
        y = tf.zeros_like(b)
    return y * 2.0


def _sum_caught(a):
    b = a * 3.0
    try:
        y = tf.reduce_sum(b, axis=-1, keepdims=True) + b     # an API by keyword, then an operator
    except Exception:                   # noqa: BLE001
        y = b
    return y


@pytest.mark.parametrize("fn", [_exp_caught, _sum_caught])
def test_a_dispatched_call_inside_try_except_is_seen_there(fn):
    """The tracer looks at the code making a dispatched API call from the first frame outside
    TensorFlow's and this backend's code (`_outside_tensorflow`), and at an operator's from the
    code using it: the calls inside the traced function's try block with an except clause are
    marked so (a graph with effects then runs eagerly, passes._effects), the others not;
    eager's results on new inputs."""
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        assert np.array_equal(lazy(_data(seed)).numpy(), fn(_data(seed)).numpy())
    assert lazy.stats.hits == 2
    marks = [node.guarded_by_except for node in lazy.graphs[0].nodes if node.kind is Kind.OP]
    assert marks == ([False, True, False] if fn is _exp_caught else [False, True, True]), marks
